//! Where the rules files are and how a load reads them, as envoyproxy/ratelimit's runtime loader
//! (lyft/goruntime) does: `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY/`, every
//! regular file below it (any extension), named for the errors by its path with `/` as `.`
//! (`config.api.yaml`), in name order; a load reads them all again and replaces the rules whole,
//! or keeps the rules in force when one file is bad.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::rules::{Rules, RulesError};

/// The loader's settings (the service's `RUNTIME_*` variables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `RUNTIME_ROOT` (`/srv/runtime_data/current`).
    pub root: PathBuf,
    /// `RUNTIME_SUBDIRECTORY` (empty).
    pub subdirectory: String,
    /// `RUNTIME_APPDIRECTORY` (`config`).
    pub appdirectory: String,
    /// `RUNTIME_WATCH_ROOT` (true): reload when `root` itself is replaced (a symlink swapped, as
    /// deployments of that service do), and name the files from the subdirectory
    /// (`config.api.yaml`); false: reload on any change in the app directory, and name the files
    /// from it (`api.yaml`).
    pub watch_root: bool,
    /// `RUNTIME_IGNOREDOTFILES` (false): skip files and directories whose name starts with `.`.
    pub ignore_dotfiles: bool,
}

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            root: PathBuf::from("/srv/runtime_data/current"),
            subdirectory: String::new(),
            appdirectory: "config".to_string(),
            watch_root: true,
            ignore_dotfiles: false,
        }
    }
}

impl Layout {
    /// The directory the files are read from.
    pub fn config_dir(&self) -> PathBuf {
        self.root.join(&self.subdirectory).join(&self.appdirectory)
    }

    /// What a change is watched on: with `watch_root`, `root`'s parent (where the symlink is
    /// swapped); else the app directory.
    pub fn watched(&self) -> PathBuf {
        if self.watch_root {
            self.root
                .parent()
                .map_or_else(|| self.root.clone(), Path::to_path_buf)
        } else {
            self.config_dir()
        }
    }

    /// Every file to load: (its name, its text), in name order. With `watch_root` and no
    /// subdirectory, none: that service's loader reads nothing then, and so every domain is
    /// unknown (and every request allowed); the service logs it.
    pub fn read(&self) -> io::Result<Vec<(String, String)>> {
        if self.watch_root && self.subdirectory.is_empty() {
            return Ok(Vec::new());
        }
        let dir = self.config_dir();
        let prefix = if self.watch_root {
            format!("{}.", self.appdirectory)
        } else {
            String::new()
        };
        let mut files = Vec::new();
        self.walk(&dir, &prefix, &mut files)?;
        files.sort();
        Ok(files)
    }

    fn walk(&self, dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) -> io::Result<()> {
        let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            if self.ignore_dotfiles && name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            // As Go's filepath.Walk: a directory is entered, a symlink to one is not (a
            // Kubernetes ConfigMap's `..data`, which would load every file twice, and a loop
            // would never end); a symlink to a file is read (the ConfigMap's files are ones).
            if fs::symlink_metadata(&path)?.is_dir() {
                self.walk(&path, &format!("{prefix}{name}."), out)?;
            } else if fs::metadata(&path)?.is_file() {
                out.push((format!("{prefix}{name}"), fs::read_to_string(&path)?));
            }
        }
        Ok(())
    }
}

/// Why a load kept the rules in force.
#[derive(Debug)]
pub enum LoadError {
    /// The directory or a file could not be read.
    Read(io::Error),
    /// A file was refused.
    Rules(RulesError),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Read(e) => write!(f, "error reading the rules files: {e}"),
            LoadError::Rules(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LoadError {}

/// The rules of every file in `layout`, all or nothing.
pub fn load(layout: &Layout, merge_domains: bool) -> Result<Rules, LoadError> {
    let files = layout.read().map_err(LoadError::Read)?;
    Rules::load(
        files.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        merge_domains,
    )
    .map_err(LoadError::Rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary one, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let path =
                std::env::temp_dir().join(format!("rl-gateway-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        fn write(&self, relative: &str, text: &str) {
            let path = self.0.join(relative);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const A: &str = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    const B: &str = "domain: b\n";

    fn layout(dir: &Dir, watch_root: bool) -> Layout {
        Layout {
            root: dir.0.join("current"),
            subdirectory: "ratelimit".into(),
            watch_root,
            ..Layout::default()
        }
    }

    #[test]
    fn every_file_below_the_app_directory_named_as_that_service_names_it() {
        let dir = Dir::new("names");
        dir.write("current/ratelimit/config/a.yaml", A);
        dir.write("current/ratelimit/config/nested/b.yml", B);
        dir.write("current/ratelimit/config/.hidden.yaml", B);
        dir.write("current/ratelimit/other/c.yaml", "not: read");
        let root = layout(&dir, true);
        let names: Vec<String> = root.read().unwrap().into_iter().map(|f| f.0).collect();
        assert_eq!(
            names,
            [
                "config..hidden.yaml",
                "config.a.yaml",
                "config.nested.b.yml"
            ]
        );
        let plain = Layout {
            ignore_dotfiles: true,
            watch_root: false,
            ..root.clone()
        };
        let names: Vec<String> = plain.read().unwrap().into_iter().map(|f| f.0).collect();
        assert_eq!(names, ["a.yaml", "nested.b.yml"]);
        assert_eq!(root.watched(), dir.0);
        assert_eq!(plain.watched(), dir.0.join("current/ratelimit/config"));
    }

    /// A Kubernetes ConfigMap's volume: the files are symlinks into `..data`, itself a symlink
    /// to the timestamped directory that holds them.
    #[test]
    fn a_configmaps_symlinks_load_each_file_once() {
        let dir = Dir::new("configmap");
        let config = dir.0.join("current/ratelimit/config");
        dir.write("current/ratelimit/config/..2026_11_29/a.yaml", A);
        std::os::unix::fs::symlink("..2026_11_29", config.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/a.yaml", config.join("a.yaml")).unwrap();
        std::os::unix::fs::symlink(".", config.join("loop")).unwrap();
        let l = Layout {
            watch_root: false,
            ignore_dotfiles: true,
            ..layout(&dir, true)
        };
        let names: Vec<String> = l.read().unwrap().into_iter().map(|f| f.0).collect();
        assert_eq!(names, ["a.yaml"]);
        assert_eq!(load(&l, false).unwrap().len(), 1);
    }

    #[test]
    fn no_subdirectory_with_watch_root_reads_nothing() {
        let dir = Dir::new("nosub");
        dir.write("current/config/a.yaml", A);
        let empty = Layout {
            subdirectory: String::new(),
            ..layout(&dir, true)
        };
        assert!(empty.read().unwrap().is_empty());
        assert!(load(&empty, false).unwrap().is_empty());
    }

    #[test]
    fn a_bad_file_refuses_the_load_with_its_name() {
        let dir = Dir::new("bad");
        dir.write("current/ratelimit/config/a.yaml", A);
        let l = layout(&dir, true);
        assert_eq!(load(&l, false).unwrap().len(), 1);
        dir.write(
            "current/ratelimit/config/b.yaml",
            "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
        );
        assert_eq!(
            load(&l, false).unwrap_err().to_string(),
            "config.b.yaml: invalid rate limit unit 'fortnight'"
        );
        let missing = Layout {
            subdirectory: "absent".into(),
            ..l
        };
        assert!(matches!(load(&missing, false), Err(LoadError::Read(_))));
    }
}
