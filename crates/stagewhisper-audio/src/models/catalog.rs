//! The known models: whisper.cpp's `ggml` files of OpenAI's Whisper, as published in the
//! whisper.cpp model repository on Hugging Face, each pinned by its size and SHA-256.
//!
//! The pinned values are the repository's Git LFS object ids (the SHA-256 of each file) and
//! sizes, as of its revision `5359861c739e955e79d9a303bcbc70fb988958b1`; each was found pinned,
//! identically, by at least two independent public projects that download these files (desktop
//! and mobile apps' model catalogues, Nix `fetchurl` hashes, Buzz's whisper.cpp loader); a model
//! whose hash could not be confirmed so would be left out. Medium and large are left out on
//! purpose: too slow for live calls on a laptop's CPU (a file of them can still be imported).
//!
//! [`CATALOG_ENV`] names a JSON file that replaces the list (same schema as
//! [`Catalog::to_json`]): a mirror, an offline install that serves the files from its own
//! server, or a test's loopback server.

use super::{valid_name, ModelError};
use serde::{Deserialize, Serialize};

/// The environment variable naming a catalogue file that replaces the built-in one.
pub const CATALOG_ENV: &str = "STAGEWHISPER_MODEL_CATALOG";

/// Where the official files are.
pub const HOME: &str = "https://huggingface.co/ggerganov/whisper.cpp/resolve/main";

/// The model the first-run guide offers: tiny.en quantised to 8 bits is the one that keeps
/// within the live budget on 2 cores (0.32 s of CPU per second of speech with partials, against
/// 0.45 s for the f16 file) with 8.5 % of words wrong on real speech (f16: 6.8 %), and is a
/// 44 MB download instead of 78 (README, speech engines).
pub const RECOMMENDED: &str = "tiny.en-q8_0";

/// One known model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// What settings and commands call it (`tiny.en`).
    pub name: String,
    /// The file's name in the models folder and at its home (`ggml-tiny.en.bin`).
    pub file: String,
    /// Bytes.
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
    /// Where it is downloaded from (`http://` or `https://`).
    pub url: String,
    /// `en` or `multilingual`.
    pub languages: String,
    /// Words wrong in a hundred on real speech, where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wer_percent: Option<f32>,
    #[serde(default)]
    pub accuracy: String,
    #[serde(default)]
    pub speed: String,
    #[serde(default)]
    pub recommended: bool,
}

/// The list of known models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub models: Vec<CatalogEntry>,
    /// The speaker model, when a catalogue file replaces the pinned one
    /// ([`super::speaker_model`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speakers: Option<CatalogEntry>,
}

/// `(name, size, sha256)` of every pinned file.
const PINNED: &[(&str, u64, &str)] = &[
    (
        "tiny.en",
        77_704_715,
        "921e4cf8686fdd993dcd081a5da5b6c365bfde1162e72b08d75ac75289920b1f",
    ),
    (
        "tiny.en-q5_1",
        32_166_155,
        "c77c5766f1cef09b6b7d47f21b546cbddd4157886b3b5d6d4f709e91e66c7c2b",
    ),
    (
        "tiny.en-q8_0",
        43_550_795,
        "5bc2b3860aa151a4c6e7bb095e1fcce7cf12c7b020ca08dcec0c6d018bb7dd94",
    ),
    (
        "tiny",
        77_691_713,
        "be07e048e1e599ad46341c8d2a135645097a538221678b7acdd1b1919c6e1b21",
    ),
    (
        "tiny-q5_1",
        32_152_673,
        "818710568da3ca15689e31a743197b520007872ff9576237bda97bd1b469c3d7",
    ),
    (
        "tiny-q8_0",
        43_537_433,
        "c2085835d3f50733e2ff6e4b41ae8a2b8d8110461e18821b09a15c40c42d1cca",
    ),
    (
        "base.en",
        147_964_211,
        "a03779c86df3323075f5e796cb2ce5029f00ec8869eee3fdfb897afe36c6d002",
    ),
    (
        "base.en-q5_1",
        59_721_011,
        "4baf70dd0d7c4247ba2b81fafd9c01005ac77c2f9ef064e00dcf195d0e2fdd2f",
    ),
    (
        "base.en-q8_0",
        81_781_811,
        "a4d4a0768075e13cfd7e19df3ae2dbc4a68d37d36a7dad45e8410c9a34f8c87e",
    ),
    (
        "base",
        147_951_465,
        "60ed5bc3dd14eea856493d334349b405782ddcaf0028d4b5df4088345fba2efe",
    ),
    (
        "base-q5_1",
        59_707_625,
        "422f1ae452ade6f30a004d7e5c6a43195e4433bc370bf23fac9cc591f01a8898",
    ),
    (
        "base-q8_0",
        81_768_585,
        "c577b9a86e7e048a0b7eada054f4dd79a56bbfa911fbdacf900ac5b567cbb7d9",
    ),
    (
        "small.en",
        487_614_201,
        "c6138d6d58ecc8322097e0f987c32f1be8bb0a18532a3f88f734d1bbf9c41e5d",
    ),
    (
        "small.en-q5_1",
        190_098_681,
        "bfdff4894dcb76bbf647d56263ea2a96645423f1669176f4844a1bf8e478ad30",
    ),
    (
        "small.en-q8_0",
        264_477_561,
        "67a179f608ea6114bd3fdb9060e762b588a3fb3bd00c4387971be4d177958067",
    ),
    (
        "small",
        487_601_967,
        "1be3a9b2063867b937e64e2ec7483364a79917e157fa98c5d94b5c1fffea987b",
    ),
    (
        "small-q5_1",
        190_085_487,
        "ae85e4a935d7a567bd102fe55afc16bb595bdb618e11b2fc7591bc08120411bb",
    ),
    (
        "small-q8_0",
        264_464_607,
        "49c8fb02b65e6049d5fa6c04f81f53b867b5ec9540406812c643f177317f779f",
    ),
];

/// Expected accuracy and speed of a model, in words: measured figures where there are some
/// (real human speech, 2 cores, one thread; see the README), else how it compares.
fn describe(name: &str) -> (Option<f32>, String, String) {
    let (size, quant) = match name.split_once('-') {
        Some((s, q)) => (s, Some(q)),
        None => (name, None),
    };
    let (wer, accuracy, speed) = match size {
        "tiny.en" => (
            Some(6.8),
            "Good for English calls: 6.8 % of words wrong on real speech (measured)",
            "Fast: about 0.45 s of CPU per second of speech, live (measured, one core)",
        ),
        "tiny" => (
            None,
            "Any language; in English a little weaker than tiny.en (not measured here)",
            "Fastest: about as fast as tiny.en",
        ),
        "base.en" => (
            None,
            "Better than tiny.en in English (not measured here)",
            "About 2 s of CPU per second of speech (measured for base, one core)",
        ),
        "base" => (
            Some(6.0),
            "Any language; 6.0 % of words wrong on real English speech (measured)",
            "About 2 s of CPU per second of speech (measured, one core)",
        ),
        "small.en" => (
            None,
            "The most accurate here, English only (not measured here)",
            "About three times base's CPU (not measured here): slow for live calls on 2 cores",
        ),
        _ => (
            None,
            "The most accurate here, any language (not measured here)",
            "About three times base's CPU (not measured here): slow for live calls on 2 cores",
        ),
    };
    if name == "tiny.en-q8_0" {
        return (
            Some(8.5),
            "Good for English calls: 8.5 % of words wrong on real speech (measured)".into(),
            "Fastest: about 0.3 s of CPU per second of speech, live (measured, one core)".into(),
        );
    }
    let (wer, accuracy, speed) = match quant {
        None => (wer, accuracy.to_string(), speed.to_string()),
        Some(q) => (
            None,
            format!("Quantised ({q}) copy of {size}: smaller, usually close to its accuracy (not measured here)"),
            format!("Like {size}, with less memory"),
        ),
    };
    (wer, accuracy, speed)
}

impl Catalog {
    /// The pinned list.
    pub fn builtin() -> Catalog {
        let models = PINNED
            .iter()
            .map(|&(name, size, sha256)| {
                let (wer_percent, accuracy, speed) = describe(name);
                let file = format!("ggml-{name}.bin");
                CatalogEntry {
                    name: name.to_string(),
                    url: format!("{HOME}/{file}"),
                    file,
                    size,
                    sha256: sha256.to_string(),
                    languages: if name.contains(".en") {
                        "en"
                    } else {
                        "multilingual"
                    }
                    .into(),
                    wer_percent,
                    accuracy,
                    speed,
                    recommended: name == RECOMMENDED,
                }
            })
            .collect();
        Catalog {
            models,
            speakers: None,
        }
    }

    /// The list in use: the file named by [`CATALOG_ENV`] when it is set, else the pinned one.
    pub fn load() -> Result<Catalog, ModelError> {
        match std::env::var_os(CATALOG_ENV).filter(|v| !v.is_empty()) {
            None => Ok(Catalog::builtin()),
            Some(path) => {
                let bad = |why: String| {
                    ModelError::new(
                        500,
                        "catalog_invalid",
                        format!(
                            "the model catalogue {} ({CATALOG_ENV}) cannot be used: {why}",
                            std::path::Path::new(&path).display()
                        ),
                    )
                };
                let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
                Catalog::from_json(&text).map_err(bad)
            }
        }
    }

    /// Reads and checks a catalogue file.
    pub fn from_json(text: &str) -> Result<Catalog, String> {
        let c: Catalog = serde_json::from_str(text).map_err(|e| e.to_string())?;
        c.check()?;
        Ok(c)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a catalogue serializes")
    }

    /// Names valid and unique, files `<something>.bin` without a path, SHA-256 as 64 hex digits,
    /// URLs `http(s)://`, languages `en` or `multilingual`.
    fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for m in &self.models {
            let n = &m.name;
            if !valid_name(n) || !seen.insert(n.as_str()) {
                return Err(format!(
                    "model {n:?}: a name must be unique, 1–64 letters, digits, `.`, `-`, `_`"
                ));
            }
            if m.file != super::file_name(n) {
                return Err(format!(
                    "model {n:?}: `file` must be {:?}",
                    super::file_name(n)
                ));
            }
            if m.sha256.len() != 64
                || !m
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(format!(
                    "model {n:?}: `sha256` must be 64 lowercase hex digits"
                ));
            }
            if !(m.url.starts_with("http://") || m.url.starts_with("https://")) {
                return Err(format!("model {n:?}: `url` must be http:// or https://"));
            }
            if m.languages != "en" && m.languages != "multilingual" {
                return Err(format!(
                    "model {n:?}: `languages` is `en` or `multilingual`"
                ));
            }
            if m.size == 0 {
                return Err(format!(
                    "model {n:?}: `size` must be the file's size in bytes"
                ));
            }
        }
        if let Some(s) = &self.speakers {
            let ok = s.name == super::speaker_model::NAME
                && s.file == stagewhisper_speakers::MODEL_FILE
                && s.sha256.len() == 64
                && s.url.starts_with("http")
                && s.size > 0;
            if !ok {
                return Err(
                    "`speakers`: name `speakers`, file `campplus.onnx`, a size, a \
                            64-digit sha256 and an http(s) url"
                        .into(),
                );
            }
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.models.iter().find(|m| m.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_list_is_valid_and_reads_back() {
        let c = Catalog::builtin();
        c.check().unwrap();
        assert_eq!(Catalog::from_json(&c.to_json()).unwrap(), c);
        for name in ["tiny.en", "base.en", "small.en", "tiny", "base", "small"] {
            assert!(c.get(name).is_some(), "{name}");
        }
        let t = c.get("tiny.en-q8_0").unwrap();
        assert!(t.recommended && t.languages == "en" && t.wer_percent == Some(8.5));
        assert_eq!(t.url, format!("{HOME}/ggml-tiny.en-q8_0.bin"));
        assert_eq!(c.get("tiny.en").unwrap().wer_percent, Some(6.8));
        assert_eq!(c.get("base").unwrap().languages, "multilingual");
        assert_eq!(c.models.iter().filter(|m| m.recommended).count(), 1);
    }

    #[test]
    fn a_bad_catalogue_file_is_refused_with_the_reason() {
        let mut c = Catalog::builtin();
        c.models[0].sha256 = "abc".into();
        assert!(Catalog::from_json(&c.to_json())
            .unwrap_err()
            .contains("sha256"));
        let mut c = Catalog::builtin();
        c.models[1].file = "../x.bin".into();
        assert!(Catalog::from_json(&c.to_json())
            .unwrap_err()
            .contains("file"));
        assert!(Catalog::from_json("{}").is_err());
    }
}
