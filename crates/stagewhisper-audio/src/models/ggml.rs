//! Is this file a whisper.cpp model? Its header, as whisper.cpp's loader reads it: the `ggml`
//! magic number, eleven little-endian `i32` hyper-parameters (vocabulary, audio context, state,
//! heads and layers of the encoder and decoder, mel bands, weight type), then the mel filters'
//! shape. Each value is checked against what a Whisper model can have, so a file of another kind
//! (another ggml/GGUF model, an archive, a PyTorch checkpoint, a truncated download) is refused
//! before it is copied anywhere.

use std::io::Read;
use std::path::Path;

/// `ggml` as whisper.cpp writes it (little-endian `u32`).
pub const MAGIC: u32 = 0x6767_6d6c;

/// What the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub n_vocab: i32,
    pub n_audio_ctx: i32,
    pub n_audio_state: i32,
    pub n_audio_head: i32,
    pub n_audio_layer: i32,
    pub n_text_ctx: i32,
    pub n_text_state: i32,
    pub n_text_head: i32,
    pub n_text_layer: i32,
    pub n_mels: i32,
    pub ftype: i32,
}

/// Bytes read to check a file: the magic, the hyper-parameters, the mel filters' shape.
pub const HEADER_LEN: usize = 4 + 11 * 4 + 2 * 4;

impl Header {
    /// English-only models have the 51,864-token vocabulary; multilingual ones one more.
    pub fn multilingual(&self) -> bool {
        self.n_vocab >= 51_865
    }

    /// `tiny`, `base`, `small`, `medium` or `large` by the encoder's depth.
    pub fn size_name(&self) -> &'static str {
        match self.n_audio_layer {
            4 => "tiny",
            6 => "base",
            12 => "small",
            24 => "medium",
            32 => "large",
            _ => "custom",
        }
    }

    /// Reads the header from the first [`HEADER_LEN`] bytes; the reason when it is not a
    /// Whisper model's.
    pub fn parse(bytes: &[u8]) -> Result<Header, String> {
        if bytes.len() < HEADER_LEN {
            return Err("the file is too short to be a Whisper model".into());
        }
        let word =
            |i: usize| i32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().expect("four bytes"));
        if word(0) as u32 != MAGIC {
            return Err(if &bytes[..4] == b"GGUF" {
                "it is a GGUF file (another kind of model), not a whisper.cpp ggml model".into()
            } else {
                "it does not start with the ggml magic number: not a whisper.cpp model".into()
            });
        }
        let h = Header {
            n_vocab: word(1),
            n_audio_ctx: word(2),
            n_audio_state: word(3),
            n_audio_head: word(4),
            n_audio_layer: word(5),
            n_text_ctx: word(6),
            n_text_state: word(7),
            n_text_head: word(8),
            n_text_layer: word(9),
            n_mels: word(10),
            ftype: word(11),
        };
        let (mel_bands, mel_fft) = (word(12), word(13));
        let state_ok = |s: i32| (64..=4096).contains(&s) && s % 64 == 0;
        let checks = [
            ((51_000..=52_000).contains(&h.n_vocab), "vocabulary size"),
            (h.n_audio_ctx == 1500, "audio context"),
            (h.n_text_ctx == 448, "text context"),
            (
                state_ok(h.n_audio_state) && state_ok(h.n_text_state),
                "model width",
            ),
            (
                (1..=64).contains(&h.n_audio_head) && (1..=64).contains(&h.n_text_head),
                "attention heads",
            ),
            (
                (1..=64).contains(&h.n_audio_layer) && (1..=64).contains(&h.n_text_layer),
                "layer count",
            ),
            (h.n_mels == 80 || h.n_mels == 128, "mel bands"),
            (
                (0..=40).contains(&(h.ftype % 1000)) && h.ftype >= 0,
                "weight type",
            ),
            (mel_bands == h.n_mels && mel_fft == 201, "mel filters"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, what)) => Err(format!(
                "its header is not a Whisper model's (the {what} is wrong): not a whisper.cpp model"
            )),
            None => Ok(h),
        }
    }

    /// Reads and checks the header of a file.
    pub fn read(path: &Path) -> Result<Header, String> {
        let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let mut buf = [0; HEADER_LEN];
        let mut got = 0;
        while got < HEADER_LEN {
            match f.read(&mut buf[got..]).map_err(|e| e.to_string())? {
                0 => break,
                n => got += n,
            }
        }
        Header::parse(&buf[..got])
    }

    /// The header's bytes (tests write model-like files with it).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = MAGIC.to_le_bytes().to_vec();
        for v in [
            self.n_vocab,
            self.n_audio_ctx,
            self.n_audio_state,
            self.n_audio_head,
            self.n_audio_layer,
            self.n_text_ctx,
            self.n_text_state,
            self.n_text_head,
            self.n_text_layer,
            self.n_mels,
            self.ftype,
            self.n_mels,
            201,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// The hyper-parameters of Whisper tiny.en (f16).
    pub fn tiny_en() -> Header {
        Header {
            n_vocab: 51_864,
            n_audio_ctx: 1500,
            n_audio_state: 384,
            n_audio_head: 6,
            n_audio_layer: 4,
            n_text_ctx: 448,
            n_text_state: 384,
            n_text_head: 6,
            n_text_layer: 4,
            n_mels: 80,
            ftype: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whisper_header_reads_back_and_others_are_refused() {
        let h = Header::tiny_en();
        let bytes = h.to_bytes();
        assert_eq!(bytes.len(), HEADER_LEN);
        let read = Header::parse(&bytes).unwrap();
        assert_eq!(read, h);
        assert!(!read.multilingual());
        assert_eq!(read.size_name(), "tiny");
        assert!(Header::parse(&bytes[..20])
            .unwrap_err()
            .contains("too short"));
        let mut gguf = bytes.clone();
        gguf[..4].copy_from_slice(b"GGUF");
        assert!(Header::parse(&gguf).unwrap_err().contains("GGUF"));
        let mut zip = bytes.clone();
        zip[..4].copy_from_slice(b"PK\x03\x04");
        assert!(Header::parse(&zip).unwrap_err().contains("magic"));
        let mut wrong = h;
        wrong.n_audio_ctx = 1499;
        assert!(Header::parse(&wrong.to_bytes())
            .unwrap_err()
            .contains("audio context"));
        let mut multi = h;
        multi.n_vocab = 51_865;
        assert!(Header::parse(&multi.to_bytes()).unwrap().multilingual());
    }
}
