//! The built-in engine: PocketSphinx in process (CMU Sphinx, Debian's `libpocketsphinx3` and
//! its US-English model `pocketsphinx-en-us`). Works with no network at all.
//!
//! The library is loaded at run time (`dlopen`), not linked: the app starts and works without
//! it, and this engine then reports [`EngineErrorKind::Unavailable`] with the line that
//! installs it. Builds need no `-dev` package. The functions used are those of PocketSphinx
//! 0.8+5prealpha (Debian 12's `libpocketsphinx.so.3` / `libsphinxbase.so.3`), checked against
//! that version's headers:
//!
//! ```c
//! arg_t const *ps_args(void);
//! cmd_ln_t *cmd_ln_parse_r(cmd_ln_t *inout, arg_t const *defn, int32 argc, char *argv[], int32 strict);
//! int cmd_ln_free_r(cmd_ln_t *cmdln);
//! ps_decoder_t *ps_init(cmd_ln_t *config);          /* retains config */
//! int ps_free(ps_decoder_t *ps);
//! int ps_start_utt(ps_decoder_t *ps);
//! int ps_process_raw(ps_decoder_t *ps, int16 const *data, size_t n_samples, int no_search, int full_utt);
//! char const *ps_get_hyp(ps_decoder_t *ps, int32 *out_best_score);   /* NULL: no hypothesis */
//! int ps_end_utt(ps_decoder_t *ps);
//! void err_set_logfp(FILE *stream);                  /* NULL: no log output */
//! ```
//!
//! (`cmd_ln_init` is variadic; `cmd_ln_parse_r` takes the same arguments as an `argv` array,
//! whose first entry is the program name, and needs no variadic call.)
//!
//! Decoding is incremental: [`Utterance::push`] runs the search on the audio as it comes
//! (`ps_process_raw`), [`Utterance::partial`] reads the current best path (`ps_get_hyp`),
//! [`Utterance::finish`] closes the utterance (`ps_end_utt`) and reads the final one, so a
//! turn's final text is ready moments after its audio ends. A decoder is not thread-safe and
//! loading one (acoustic model, a 26 MB language model, the dictionary) takes a while, so each
//! open utterance holds a decoder of its own, taken from a small pool and given back when the
//! turn is done; building the engine loads the first one in the background.
//!
//! PocketSphinx normalises each turn by a running cepstral mean (its live CMN) that starts from
//! the model's default and is updated as each turn ends. A fresh decoder's first turn is
//! therefore heard through a mean that is not this channel's (on espeak-ng speech, "our
//! budget is about twenty thousand dollars" came out as "our duties ah twenty thousand dollars
//! apiece eduardo", and as "but it is about twenty thousand dollars the worker" on every later
//! turn). So a fresh decoder's first turn is kept and decoded a second time at `finish`, once
//! its own mean is known: it then reads as later turns do, for the cost of one more pass over
//! one turn per decoder (two decoders at most are kept).

use super::{Engine, EngineError, Utterance};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// How to install what this engine needs (Debian, Ubuntu).
pub const INSTALL_HINT: &str = "sudo apt-get install libpocketsphinx3 pocketsphinx-en-us";
/// Where Debian's `pocketsphinx-en-us` puts the model.
pub const DEFAULT_MODEL_DIR: &str = "/usr/share/pocketsphinx/model/en-us";
/// Overrides the model directory (same layout: `en-us/`, `en-us.lm.bin`, `cmudict-en-us.dict`).
pub const MODEL_DIR_ENV: &str = "STAGEWHISPER_POCKETSPHINX_MODEL";
/// Decoders kept loaded between turns (one per channel is what a call needs).
const MAX_IDLE: usize = 2;

/// Where the library and the model are.
#[derive(Debug, Clone)]
pub struct BuiltinConfig {
    /// `libpocketsphinx.so.3` (searched the usual way).
    pub library: String,
    /// `libsphinxbase.so.3`.
    pub base_library: String,
    pub model_dir: PathBuf,
}

impl Default for BuiltinConfig {
    /// Debian's names; the model directory from `STAGEWHISPER_POCKETSPHINX_MODEL` when set.
    fn default() -> Self {
        BuiltinConfig {
            library: "libpocketsphinx.so.3".into(),
            base_library: "libsphinxbase.so.3".into(),
            model_dir: std::env::var_os(MODEL_DIR_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR)),
        }
    }
}

type PsArgs = unsafe extern "C" fn() -> *const c_void;
type CmdLnParseR =
    unsafe extern "C" fn(*mut c_void, *const c_void, i32, *const *const c_char, i32) -> *mut c_void;
type CmdLnFreeR = unsafe extern "C" fn(*mut c_void) -> c_int;
type PsInit = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type PsFree = unsafe extern "C" fn(*mut c_void) -> c_int;
type PsStartUtt = unsafe extern "C" fn(*mut c_void) -> c_int;
type PsProcessRaw = unsafe extern "C" fn(*mut c_void, *const i16, usize, c_int, c_int) -> c_int;
type PsGetHyp = unsafe extern "C" fn(*mut c_void, *mut i32) -> *const c_char;
type PsEndUtt = unsafe extern "C" fn(*mut c_void) -> c_int;
type ErrSetLogfp = unsafe extern "C" fn(*mut c_void);

/// The loaded libraries and the functions used.
struct Lib {
    ps_args: PsArgs,
    cmd_ln_parse_r: CmdLnParseR,
    cmd_ln_free_r: CmdLnFreeR,
    ps_init: PsInit,
    ps_free: PsFree,
    ps_start_utt: PsStartUtt,
    ps_process_raw: PsProcessRaw,
    ps_get_hyp: PsGetHyp,
    ps_end_utt: PsEndUtt,
    /// Decoder creation reads and writes the libraries' global state (logging, the
    /// configuration parser): one at a time.
    init_lock: Mutex<()>,
    // Kept loaded for as long as the function pointers above are used (the whole process).
    _base: libloading::Library,
    _ps: libloading::Library,
}

impl Lib {
    fn load(cfg: &BuiltinConfig) -> Result<Lib, String> {
        // SAFETY: loading a shared library runs its initialisers; PocketSphinx's and
        // sphinxbase's are plain C with no side effects beyond their own globals.
        let base = unsafe { libloading::Library::new(&cfg.base_library) }
            .map_err(|e| format!("cannot load {}: {e}", cfg.base_library))?;
        // SAFETY: as above.
        let ps = unsafe { libloading::Library::new(&cfg.library) }
            .map_err(|e| format!("cannot load {}: {e}", cfg.library))?;
        fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
            // SAFETY: every `T` here is the exact C signature of `name` in PocketSphinx
            // 0.8+5prealpha (see the module documentation).
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("{name} missing from PocketSphinx: {e}"))
        }
        let lib = Lib {
            ps_args: sym(&ps, "ps_args")?,
            cmd_ln_parse_r: sym(&base, "cmd_ln_parse_r")?,
            cmd_ln_free_r: sym(&base, "cmd_ln_free_r")?,
            ps_init: sym(&ps, "ps_init")?,
            ps_free: sym(&ps, "ps_free")?,
            ps_start_utt: sym(&ps, "ps_start_utt")?,
            ps_process_raw: sym(&ps, "ps_process_raw")?,
            ps_get_hyp: sym(&ps, "ps_get_hyp")?,
            ps_end_utt: sym(&ps, "ps_end_utt")?,
            init_lock: Mutex::new(()),
            _base: base,
            _ps: ps,
        };
        let err_set_logfp: ErrSetLogfp = sym(&lib._base, "err_set_logfp")?;
        // SAFETY: NULL turns the libraries' logging off (they would otherwise write
        // configuration dumps and progress to stderr).
        unsafe { err_set_logfp(std::ptr::null_mut()) };
        Ok(lib)
    }
}

/// The process's copy of the libraries, by name (loaded once; a failure is not kept, so
/// installing the package while the app runs is enough).
fn library(cfg: &BuiltinConfig) -> Result<Arc<Lib>, String> {
    type Loaded = Mutex<Vec<((String, String), Arc<Lib>)>>;
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    let key = (cfg.library.clone(), cfg.base_library.clone());
    let mut loaded = LOADED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, lib)) = loaded.iter().find(|(k, _)| *k == key) {
        return Ok(lib.clone());
    }
    let lib = Arc::new(Lib::load(cfg)?);
    loaded.push((key, lib.clone()));
    Ok(lib)
}

/// The model's files.
#[derive(Debug, Clone)]
struct ModelPaths {
    hmm: CString,
    lm: CString,
    dict: CString,
}

impl ModelPaths {
    fn find(dir: &Path) -> Result<ModelPaths, String> {
        let hmm = dir.join("en-us");
        let lm = dir.join("en-us.lm.bin");
        let dict = dir.join("cmudict-en-us.dict");
        for (p, what) in [
            (&hmm.join("mdef"), "acoustic model"),
            (&lm, "language model"),
            (&dict, "dictionary"),
        ] {
            if !p.is_file() {
                return Err(format!("the {what} is missing ({})", p.display()));
            }
        }
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_encoded_bytes())
                .map_err(|_| format!("{} has a NUL byte", p.display()))
        };
        Ok(ModelPaths {
            hmm: c(&hmm)?,
            lm: c(&lm)?,
            dict: c(&dict)?,
        })
    }
}

/// One loaded decoder.
struct Decoder {
    ps: *mut c_void,
    lib: Arc<Lib>,
    /// It has not finished a turn yet: its cepstral mean is still the model's default.
    fresh: bool,
}

// SAFETY: a decoder is used by one thread at a time (it is owned by one `Utterance` or sits in
// the pool behind a mutex); PocketSphinx keeps a decoder's state in its own allocation.
unsafe impl Send for Decoder {}

impl Decoder {
    fn load(lib: &Arc<Lib>, paths: &ModelPaths) -> Result<Decoder, String> {
        let _one_at_a_time = lib.init_lock.lock().unwrap_or_else(|e| e.into_inner());
        // `-fwdflat no`: one search pass instead of two. On the speech bench (40 turns, two
        // voices, alternating runs) the engine's time fell by about a fifth (RTF mean 0.33 →
        // 0.27) and a turn's final text came 200 ms sooner (p50 238–283 → 36–47 ms), for
        // 1.9 points of WER (71.1 → 73.0 %). `-bestpath no` as well cost 10 points: kept on.
        let argv: [&CStr; 9] = [
            c"stagewhisper",
            c"-hmm",
            &paths.hmm,
            c"-lm",
            &paths.lm,
            c"-dict",
            &paths.dict,
            c"-fwdflat",
            c"no",
        ];
        let ptrs: Vec<*const c_char> = argv.iter().map(|s| s.as_ptr()).collect();
        // SAFETY: `ps_args()` returns the decoder's static argument definitions;
        // `cmd_ln_parse_r` copies the strings it keeps; `argv` outlives the call.
        let config = unsafe {
            (lib.cmd_ln_parse_r)(
                std::ptr::null_mut(),
                (lib.ps_args)(),
                ptrs.len() as i32,
                ptrs.as_ptr(),
                1,
            )
        };
        if config.is_null() {
            return Err("PocketSphinx refused its configuration".into());
        }
        // SAFETY: `config` is a valid configuration; `ps_init` retains it, so our reference
        // is released right after.
        let ps = unsafe { (lib.ps_init)(config) };
        // SAFETY: our reference to `config`.
        unsafe { (lib.cmd_ln_free_r)(config) };
        if ps.is_null() {
            return Err("PocketSphinx could not load its model".into());
        }
        Ok(Decoder {
            ps,
            lib: lib.clone(),
            fresh: true,
        })
    }

    fn start(&mut self) -> bool {
        // SAFETY: a valid decoder, used by this thread only.
        unsafe { (self.lib.ps_start_utt)(self.ps) >= 0 }
    }

    fn process(&mut self, samples: &[i16]) -> bool {
        // SAFETY: `samples` is valid for `len` reads during the call.
        unsafe { (self.lib.ps_process_raw)(self.ps, samples.as_ptr(), samples.len(), 0, 0) >= 0 }
    }

    fn hyp(&mut self) -> String {
        let mut score = 0i32;
        // SAFETY: the returned string belongs to the decoder and stays valid until its next
        // call; it is copied at once.
        let p = unsafe { (self.lib.ps_get_hyp)(self.ps, &mut score) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string from PocketSphinx.
        unsafe { CStr::from_ptr(p) }
            .to_string_lossy()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn end(&mut self) -> bool {
        // SAFETY: a valid decoder with an utterance started.
        unsafe { (self.lib.ps_end_utt)(self.ps) >= 0 }
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: the decoder is ours and no longer used.
        unsafe { (self.lib.ps_free)(self.ps) };
    }
}

struct PoolState {
    idle: Vec<Decoder>,
    /// A decoder is being loaded in the background.
    warming: bool,
}

struct Pool {
    lib: Arc<Lib>,
    paths: ModelPaths,
    state: Mutex<PoolState>,
    warmed: Condvar,
}

impl Pool {
    fn take(&self) -> Result<Decoder, EngineError> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.idle.is_empty() && st.warming {
            st = self.warmed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(d) = st.idle.pop() {
            return Ok(d);
        }
        drop(st);
        Decoder::load(&self.lib, &self.paths).map_err(unavailable)
    }

    fn give_back(&self, d: Decoder) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.idle.len() < MAX_IDLE {
            st.idle.push(d);
        }
    }
}

fn unavailable(detail: String) -> EngineError {
    EngineError::unavailable(format!(
        "The built-in speech engine (PocketSphinx) cannot run here: {detail}. Install it with: \
         {INSTALL_HINT}"
    ))
}

/// PocketSphinx in process.
pub struct BuiltinEngine {
    pool: Arc<Pool>,
}

impl BuiltinEngine {
    /// Loads the library and checks the model's files (quick); the first decoder then loads
    /// on a background thread. [`EngineErrorKind::Unavailable`](super::EngineErrorKind) when
    /// either is missing.
    pub fn new(cfg: BuiltinConfig) -> Result<BuiltinEngine, EngineError> {
        let lib = library(&cfg).map_err(unavailable)?;
        let paths = ModelPaths::find(&cfg.model_dir).map_err(unavailable)?;
        let pool = Arc::new(Pool {
            lib,
            paths,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                warming: true,
            }),
            warmed: Condvar::new(),
        });
        let warm = pool.clone();
        let spawned = std::thread::Builder::new()
            .name("sw-sphinx-load".into())
            .spawn(move || {
                let d = Decoder::load(&warm.lib, &warm.paths);
                let mut st = warm.state.lock().unwrap_or_else(|e| e.into_inner());
                match d {
                    Ok(d) => st.idle.push(d),
                    Err(e) => tracing::warn!("PocketSphinx: {e}"),
                }
                st.warming = false;
                warm.warmed.notify_all();
            });
        if spawned.is_err() {
            pool.state.lock().unwrap_or_else(|e| e.into_inner()).warming = false;
        }
        Ok(BuiltinEngine { pool })
    }

    /// Decoders loaded and waiting for a turn.
    pub fn idle_decoders(&self) -> usize {
        self.pool
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .idle
            .len()
    }
}

impl Engine for BuiltinEngine {
    fn kind(&self) -> &'static str {
        "builtin"
    }

    fn begin(&self) -> Result<Box<dyn Utterance>, EngineError> {
        let mut d = self.pool.take()?;
        if !d.start() {
            return Err(EngineError::decode(
                "PocketSphinx could not start an utterance",
            ));
        }
        Ok(Box::new(SphinxUtterance {
            kept: if d.fresh { Some(Vec::new()) } else { None },
            decoder: Some(d),
            pool: self.pool.clone(),
        }))
    }
}

struct SphinxUtterance {
    decoder: Option<Decoder>,
    pool: Arc<Pool>,
    /// A fresh decoder's first turn, kept to be decoded again once its mean is known.
    kept: Option<Vec<i16>>,
}

impl Utterance for SphinxUtterance {
    fn push(&mut self, samples: &[i16]) -> Result<(), EngineError> {
        let Some(d) = &mut self.decoder else {
            return Err(EngineError::decode(
                "PocketSphinx failed earlier in this turn",
            ));
        };
        if let Some(k) = &mut self.kept {
            k.extend_from_slice(samples);
        }
        if samples.is_empty() || d.process(samples) {
            return Ok(());
        }
        // A decoder that failed is not reused.
        self.decoder = None;
        Err(EngineError::decode(
            "PocketSphinx could not decode the audio",
        ))
    }

    fn partial(&mut self) -> Option<String> {
        let text = self.decoder.as_mut()?.hyp();
        (!text.is_empty()).then_some(text)
    }

    fn finish(mut self: Box<Self>) -> Result<String, EngineError> {
        let Some(mut d) = self.decoder.take() else {
            return Err(EngineError::decode(
                "PocketSphinx failed earlier in this turn",
            ));
        };
        if !d.end() {
            return Err(EngineError::decode(
                "PocketSphinx could not end the utterance",
            ));
        }
        // A fresh decoder heard its first turn with the model's default cepstral mean (its
        // live CMN adapts only as turns end): once more, now that the mean is this audio's.
        if let Some(first) = self.kept.take() {
            d.fresh = false;
            if !(d.start() && d.process(&first) && d.end()) {
                return Err(EngineError::decode(
                    "PocketSphinx could not decode the audio",
                ));
            }
        }
        let text = d.hyp();
        self.pool.give_back(d);
        Ok(text)
    }
}

impl Drop for SphinxUtterance {
    fn drop(&mut self) {
        // An utterance given up on: its decoder is closed and reused.
        if let Some(mut d) = self.decoder.take() {
            if d.end() {
                self.pool.give_back(d);
            }
        }
    }
}
