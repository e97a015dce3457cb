use super::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

/// A section at version 2: `name` was `title` in version 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Toy {
    name: String,
    loud: bool,
}

impl Section for Toy {
    const KEY: &'static str = "toy";
    const VERSION: u32 = 2;

    fn validate(&self) -> Result<(), Invalid> {
        if self.name.len() > 10 {
            return Err(Invalid::new("name_too_long", "`name`: at most 10 bytes"));
        }
        Ok(())
    }

    fn upgrade(from: u32, mut value: Value) -> Result<Value, String> {
        match from {
            1 => {
                let title = value["title"].take();
                Ok(json!({"name": title, "loud": value["loud"]}))
            }
            _ => Err(format!("no version {from}")),
        }
    }

    fn legacy(data_dir: &Path) -> Legacy<Self> {
        Legacy::from_file(data_dir.join("toy.json"), |t: Toy| t)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Other {
    n: u32,
}

impl Section for Other {
    const KEY: &'static str = "other";
}

fn on_disk(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join(FILE)).unwrap()).unwrap()
}

#[test]
fn saved_whole_private_and_read_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    assert_eq!(s.get::<Toy>(), Toy::default());
    assert!(!dir.path().join(FILE).exists(), "reading writes nothing");
    let t = Toy {
        name: "a".into(),
        loud: true,
    };
    s.set(&t).unwrap();
    s.set(&Other { n: 7 }).unwrap();
    let mode = std::fs::metadata(dir.path().join(FILE))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(
        on_disk(dir.path()),
        json!({"format": 1, "sections": {
            "toy": {"version": 2, "value": {"name": "a", "loud": true}},
            "other": {"version": 1, "value": {"n": 7}}}})
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [FILE], "no temporary file left");
    drop(s);
    let again = SettingsStore::open(dir.path()).unwrap();
    assert_eq!((again.get::<Toy>(), again.get::<Other>().n), (t, 7));
    assert!(again.problems().is_empty());
}

#[test]
fn an_invalid_section_is_refused_with_its_code_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    let long = Toy {
        name: "x".repeat(11),
        loud: false,
    };
    let e = s.set(&long).unwrap_err();
    assert_eq!(e.code(), "name_too_long");
    assert!(!dir.path().join(FILE).exists());
    s.set(&Toy {
        name: "ok".into(),
        loud: false,
    })
    .unwrap();
    let before = std::fs::read(dir.path().join(FILE)).unwrap();
    assert_eq!(s.set(&long).unwrap_err().code(), "name_too_long");
    // A change that refuses itself writes nothing either.
    let refused = s.update::<Toy, ()>(|t| {
        t.loud = true;
        Err(Invalid::new("nope", "refused"))
    });
    assert_eq!(refused.unwrap_err().code(), "nope");
    assert_eq!(std::fs::read(dir.path().join(FILE)).unwrap(), before);
    assert_eq!(s.get::<Toy>().name, "ok");
    assert!(!s.get::<Toy>().loud);
}

#[test]
fn a_failed_write_changes_nothing_on_disk_or_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    s.set(&Other { n: 1 }).unwrap();
    // The document's place taken by a folder: the rename fails (whoever runs the test).
    std::fs::remove_file(dir.path().join(FILE)).unwrap();
    std::fs::create_dir(dir.path().join(FILE)).unwrap();
    let e = s.set(&Other { n: 2 }).unwrap_err();
    assert_eq!(e.code(), "settings_write_failed");
    assert_eq!(s.get::<Other>().n, 1, "the copy in memory is unchanged");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, [FILE], "no temporary file left: {left:?}");
}

#[test]
fn an_older_section_is_upgraded_and_a_newer_one_kept_untouched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(FILE),
        json!({"format": 1, "sections": {
            "toy": {"version": 1, "value": {"title": "old", "loud": true}},
            "other": {"version": 9, "value": {"n": 5, "future": 1}}}})
        .to_string(),
    )
    .unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    assert_eq!(
        s.get::<Toy>(),
        Toy {
            name: "old".into(),
            loud: true
        }
    );
    assert_eq!(
        on_disk(dir.path())["sections"]["toy"],
        json!({"version": 2, "value": {"name": "old", "loud": true}}),
        "saved upgraded"
    );
    assert_eq!(s.get::<Other>(), Other::default());
    let p = s.problems();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].code.as_str(), p[0].section.as_deref()),
        ("settings_section_too_new", Some("other"))
    );
    assert_eq!(
        on_disk(dir.path())["sections"]["other"]["version"],
        9,
        "kept until saved again"
    );
    s.set(&Other { n: 6 }).unwrap();
    assert!(s.problems().is_empty());
    // A document of a newer format is refused, not overwritten.
    std::fs::write(dir.path().join(FILE), r#"{"format": 2, "whatever": []}"#).unwrap();
    let e = SettingsStore::open(dir.path()).unwrap_err();
    assert_eq!(e.code(), "settings_too_new");
    assert!(dir.path().join(FILE).exists());
}

#[test]
fn an_old_file_is_moved_in_once_and_a_broken_one_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toy.json"), r#"{"name": "legacy"}"#).unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    assert!(s.has::<Toy>());
    assert_eq!(s.get::<Toy>().name, "legacy");
    assert!(!dir.path().join("toy.json").exists());
    assert!(dir.path().join("toy.json.migrated").exists());
    assert_eq!(
        on_disk(dir.path())["sections"]["toy"]["value"]["name"],
        "legacy"
    );
    // A new old file later is not read: the document has the section.
    std::fs::write(dir.path().join("toy.json"), r#"{"name": "stale"}"#).unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    assert_eq!(s.get::<Toy>().name, "legacy");

    // A broken old file: defaults, renamed, reported with a stable code.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toy.json"), r#"{"name": "#).unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    assert_eq!(s.get::<Toy>(), Toy::default());
    assert!(dir.path().join("toy.json.unreadable").exists());
    let p = s.problems();
    assert_eq!(
        (p[0].code.as_str(), p[0].file.as_str()),
        ("legacy_settings_unreadable", "toy.json.unreadable")
    );
    // One that reads but fails the checks is no better.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toy.json"), r#"{"name": "far too long"}"#).unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    assert_eq!(s.get::<Toy>(), Toy::default());
    assert_eq!(s.problems()[0].code, "legacy_settings_unreadable");
    assert!(dir.path().join("toy.json.unreadable").exists());
}

#[test]
fn a_document_that_is_not_json_is_kept_aside_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE), b"{\"format\": 1, \"sect").unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    assert_eq!(s.problems()[0].code, "settings_unreadable");
    assert_eq!(
        std::fs::read(dir.path().join("settings.json.unreadable")).unwrap(),
        b"{\"format\": 1, \"sect"
    );
    s.set(&Other { n: 3 }).unwrap();
    assert_eq!(SettingsStore::open(dir.path()).unwrap().get::<Other>().n, 3);
}

#[test]
fn concurrent_writers_of_different_sections_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = SettingsStore::open(dir.path()).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    if i % 2 == 0 {
                        s.update::<Other, _>(|o| {
                            o.n += 1;
                            Ok(())
                        })
                        .unwrap();
                    } else {
                        s.update::<Toy, _>(|t| {
                            t.name = format!("{}", t.name.len() % 9);
                            t.loud = !t.loud;
                            Ok(())
                        })
                        .unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.get::<Other>().n, 80, "no update lost");
    let again = SettingsStore::open(dir.path()).unwrap();
    assert_eq!(again.get::<Other>().n, 80);
    assert!(!again.get::<Toy>().loud, "80 toggles");
}
