//! Log mel filter-bank features as Kaldi computes them (`compute-fbank-feats` with its
//! defaults, which is also what `torchaudio.compliance.kaldi.fbank` and `kaldi-native-fbank`
//! give): what the CAM++ speaker model was trained on.
//!
//! 16 kHz input; frames of 25 ms every 10 ms, only whole frames (`snip_edges`); per frame the
//! DC offset is removed, a pre-emphasis of 0.97 applied, the "povey" window (a Hann window to
//! the power 0.85), a 512-point FFT, the power spectrum through [`BINS`] triangular filters
//! spaced evenly on the mel scale (`1127 ln(1 + f/700)`) from 20 Hz to 8 kHz, and the natural
//! log (floored at `f32::EPSILON`). No dither: the same audio always gives the same features.
//!
//! Samples are taken at the scale of 16-bit audio (as Kaldi reads WAV files): `i16` as is.

use realfft::{RealFftPlanner, RealToComplex};
use std::sync::Arc;

/// Mel bins per frame.
pub const BINS: usize = 80;
/// Samples per frame (25 ms at 16 kHz).
pub const FRAME: usize = 400;
/// Samples between frames (10 ms at 16 kHz).
pub const SHIFT: usize = 160;
const FFT: usize = 512;
const PREEMPH: f32 = 0.97;
const LOW_HZ: f32 = 20.0;
const RATE: f32 = 16_000.0;

/// The feature extractor (the window, the filters and the FFT plan, made once).
pub struct Fbank {
    window: Vec<f32>,
    /// Per mel bin: the first FFT bin it covers and its weights from there.
    filters: Vec<(usize, Vec<f32>)>,
    fft: Arc<dyn RealToComplex<f32>>,
}

impl Default for Fbank {
    fn default() -> Self {
        Fbank::new()
    }
}

fn mel(hz: f32) -> f32 {
    1127.0 * (1.0 + hz / 700.0).ln()
}

impl Fbank {
    pub fn new() -> Fbank {
        let window = (0..FRAME)
            .map(|i| {
                let a = 2.0 * std::f64::consts::PI * i as f64 / (FRAME - 1) as f64;
                (0.5 - 0.5 * a.cos()).powf(0.85) as f32
            })
            .collect();
        let (lo, hi) = (mel(LOW_HZ), mel(RATE / 2.0));
        let delta = (hi - lo) / (BINS + 1) as f32;
        let bin_hz = RATE / FFT as f32;
        let filters = (0..BINS)
            .map(|b| {
                let left = lo + b as f32 * delta;
                let center = left + delta;
                let right = center + delta;
                let mut first = None;
                let mut weights = Vec::new();
                // Kaldi leaves out the Nyquist bin.
                for i in 0..FFT / 2 {
                    let m = mel(bin_hz * i as f32);
                    if m > left && m < right {
                        first.get_or_insert(i);
                        weights.push(if m <= center {
                            (m - left) / (center - left)
                        } else {
                            (right - m) / (right - center)
                        });
                    } else if first.is_some() {
                        break;
                    }
                }
                (first.unwrap_or(0), weights)
            })
            .collect();
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(FFT);
        Fbank {
            window,
            filters,
            fft,
        }
    }

    /// Whole frames in `n` samples.
    pub fn frames(n: usize) -> usize {
        if n < FRAME {
            0
        } else {
            1 + (n - FRAME) / SHIFT
        }
    }

    /// The features of `samples` (16 kHz mono): [`Fbank::frames`] rows of [`BINS`] values,
    /// row after row.
    pub fn compute(&self, samples: &[i16]) -> Vec<f32> {
        let frames = Fbank::frames(samples.len());
        let mut out = Vec::with_capacity(frames * BINS);
        let mut buf = self.fft.make_input_vec();
        let mut spec = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut power = vec![0f32; FFT / 2 + 1];
        for f in 0..frames {
            let frame = &samples[f * SHIFT..f * SHIFT + FRAME];
            let mean = frame.iter().map(|&s| s as f32).sum::<f32>() / FRAME as f32;
            for (b, &s) in buf.iter_mut().zip(frame) {
                *b = s as f32 - mean;
            }
            for i in (1..FRAME).rev() {
                buf[i] -= PREEMPH * buf[i - 1];
            }
            buf[0] -= PREEMPH * buf[0];
            for (b, w) in buf.iter_mut().zip(&self.window) {
                *b *= w;
            }
            buf[FRAME..].fill(0.0);
            self.fft
                .process_with_scratch(&mut buf, &mut spec, &mut scratch)
                .expect("buffers of the plan's sizes");
            for (p, c) in power.iter_mut().zip(&spec) {
                *p = c.norm_sqr();
            }
            for (first, weights) in &self.filters {
                let e: f32 = weights
                    .iter()
                    .zip(&power[*first..])
                    .map(|(w, p)| w * p)
                    .sum();
                out.push(e.max(f32::EPSILON).ln());
            }
        }
        out
    }
}

/// Subtracts each bin's mean over the frames (what the speaker model expects per segment).
pub fn subtract_mean(features: &mut [f32]) {
    let frames = features.len() / BINS;
    if frames == 0 {
        return;
    }
    let mut mean = [0f64; BINS];
    for row in features.chunks_exact(BINS) {
        for (m, v) in mean.iter_mut().zip(row) {
            *m += *v as f64;
        }
    }
    for m in &mut mean {
        *m /= frames as f64;
    }
    for row in features.chunks_exact_mut(BINS) {
        for (v, m) in row.iter_mut().zip(&mean) {
            *v -= *m as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_count_is_kaldis() {
        assert_eq!(Fbank::frames(399), 0);
        assert_eq!(Fbank::frames(400), 1);
        assert_eq!(Fbank::frames(559), 1);
        assert_eq!(Fbank::frames(560), 2);
        assert_eq!(Fbank::frames(16_000), 98);
    }

    #[test]
    fn filters_cover_the_band_in_order() {
        let f = Fbank::new();
        assert_eq!(f.filters.len(), BINS);
        let firsts: Vec<usize> = f.filters.iter().map(|(s, _)| *s).collect();
        assert!(firsts.windows(2).all(|w| w[0] <= w[1]), "{firsts:?}");
        assert!(f.filters.iter().all(|(_, w)| !w.is_empty()));
        assert!(f
            .filters
            .iter()
            .flat_map(|(_, w)| w)
            .all(|w| (0.0..=1.0).contains(w)));
    }

    #[test]
    fn a_tone_lights_the_bin_of_its_frequency() {
        let samples: Vec<i16> = (0..16_000)
            .map(|i| {
                ((i as f32 * 2.0 * std::f32::consts::PI * 1000.0 / RATE).sin() * 8000.0) as i16
            })
            .collect();
        let feats = Fbank::new().compute(&samples);
        let row = &feats[50 * BINS..51 * BINS];
        let top = (0..BINS)
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap();
        // 1 kHz is mel 999.99; bins are ~35 mel wide from mel(20) = 31.7.
        let centre = |b: usize| mel(LOW_HZ) + (b + 1) as f32 * (mel(8000.0) - mel(LOW_HZ)) / 81.0;
        assert!((centre(top) - mel(1000.0)).abs() < 36.0, "bin {top}");
    }
}
