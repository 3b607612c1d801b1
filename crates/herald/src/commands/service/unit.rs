//! The files `herald service install` writes: the templates of `deploy/`, embedded so the
//! repository's files are the only source, rendered with this machine's paths.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::config::{Env, Loaded, candidates};

const SYSTEM_UNIT: &str = include_str!("../../../../../deploy/herald.service");
const USER_UNIT: &str = include_str!("../../../../../deploy/herald-user.service");
const SYSUSERS: &str = include_str!("../../../../../deploy/herald.sysusers");
const TMPFILES: &str = include_str!("../../../../../deploy/herald.tmpfiles");

/// The config the system unit reads unless herald was installed with another one.
pub const SYSTEM_CONFIG: &str = "/etc/herald/config.toml";
/// The system unit's `StateDirectory=`: the only place the system service can write.
pub const STATE_DIR: &str = "/var/lib/herald";

/// For tests: every path install, uninstall, status and doctor use is taken inside this
/// directory, and systemctl is not run unless `HERALD_SYSTEMCTL` names one.
pub const ROOT_VAR: &str = "HERALD_SERVICE_ROOT";
/// For tests: the program run in place of `systemctl`.
pub const SYSTEMCTL_VAR: &str = "HERALD_SYSTEMCTL";

/// Which service manager runs herald.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The current user's manager (`systemctl --user`).
    User,
    /// The system manager, running herald as the user `herald`.
    System,
}

impl Mode {
    /// The command-line flag that picks this mode.
    pub fn flag(self) -> &'static str {
        match self {
            Mode::User => "--user",
            Mode::System => "--system",
        }
    }

    /// `user` or `system`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::User => "user",
            Mode::System => "system",
        }
    }
}

/// Where files go and which systemctl runs, from the environment.
#[derive(Debug, Clone, Default)]
pub struct Host {
    root: Option<PathBuf>,
    /// The systemctl to run, or `None` to run none.
    pub systemctl: Option<String>,
}

impl Host {
    /// Whether the files go to a test root (where no service manager will run them).
    pub fn is_test_root(&self) -> bool {
        self.root.is_some()
    }

    /// The real machine, or the test root of [`ROOT_VAR`].
    pub fn from_env(env: &Env) -> Host {
        let text = |name| env.var(name).map(|v| v.to_string_lossy().into_owned());
        let root = text(ROOT_VAR).map(PathBuf::from);
        let systemctl = match (&root, text(SYSTEMCTL_VAR)) {
            (_, Some(program)) => Some(program),
            // A test root holds no units the real manager should load.
            (Some(_), None) => None,
            (None, None) => Some("systemctl".to_owned()),
        };
        Host { root, systemctl }
    }

    /// `path` inside the test root, or as it is.
    fn place(&self, path: &Path) -> PathBuf {
        match &self.root {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_owned(),
        }
    }
}

/// One file install writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFile {
    /// What it is: `unit`, `sysusers` or `tmpfiles`.
    pub role: &'static str,
    /// Where it goes.
    pub path: PathBuf,
    /// What it holds.
    pub contents: String,
}

/// Where install puts each file for `mode`, with the template it renders.
fn places(mode: Mode, host: &Host) -> anyhow::Result<Vec<(&'static str, PathBuf, &'static str)>> {
    Ok(match mode {
        Mode::System => vec![
            ("unit", host.place(Path::new("/etc/systemd/system/herald.service")), SYSTEM_UNIT),
            ("sysusers", host.place(Path::new("/etc/sysusers.d/herald.conf")), SYSUSERS),
            ("tmpfiles", host.place(Path::new("/etc/tmpfiles.d/herald.conf")), TMPFILES),
        ],
        Mode::User => {
            let config = dirs::config_dir().context(
                "cannot find your home directory for the user unit; set HOME, or use --system",
            )?;
            vec![("unit", host.place(&config.join("systemd/user/herald.service")), USER_UNIT)]
        }
    })
}

/// The paths install writes for `mode`, whether or not they exist.
pub fn paths(mode: Mode, host: &Host) -> anyhow::Result<Vec<PathBuf>> {
    Ok(places(mode, host)?.into_iter().map(|(_, path, _)| path).collect())
}

/// Everything install writes for `mode`, and the config file the unit reads.
#[derive(Debug)]
pub struct Plan {
    /// The files, the unit first.
    pub files: Vec<UnitFile>,
    /// The config file the unit names in `HERALD_CONFIG`.
    pub config: PathBuf,
    /// The herald binary the unit runs.
    pub exe: PathBuf,
}

/// The files install would write now: templates rendered with this binary's absolute path,
/// the config's, and a stop timeout longer than the configured drain.
pub fn plan(mode: Mode, host: &Host, loaded: &Loaded) -> anyhow::Result<Plan> {
    let exe = std::env::current_exe()
        .and_then(fs::canonicalize)
        .context("cannot find the path of this herald binary for ExecStart=")?;
    let config = config_path(mode, loaded)?;
    let stop_timeout_s = stop_timeout_s(loaded.config.gateway.drain_timeout_s);
    let exec = format!("ExecStart={} gateway", unit_word(&exe)?);
    let environment = format!("Environment={}", env_word("HERALD_CONFIG", &config)?);
    let files = places(mode, host)?
        .into_iter()
        .map(|(role, path, template)| {
            let contents = render(template, &exec, &environment, stop_timeout_s);
            UnitFile { role, path, contents }
        })
        .collect();
    Ok(Plan { files, config, exe })
}

/// The config the unit should read: the one loaded, else the default for the mode. A system
/// service cannot read home directories (`ProtectHome=yes`), so a config found there is
/// replaced by [`SYSTEM_CONFIG`]; install says so.
fn config_path(mode: Mode, loaded: &Loaded) -> anyhow::Result<PathBuf> {
    let loaded_path = match &loaded.path {
        Some(path) => Some(fs::canonicalize(path).with_context(|| {
            format!("cannot find the absolute path of the config {}", path.display())
        })?),
        None => None,
    };
    Ok(match (mode, loaded_path) {
        (Mode::System, Some(path)) if !in_home(&path) => path,
        (Mode::System, _) => PathBuf::from(SYSTEM_CONFIG),
        (Mode::User, Some(path)) => path,
        (Mode::User, None) => candidates(&Env::process())
            .into_iter()
            .next()
            .context("cannot find your home directory for the config path; set HOME")?,
    })
}

/// Whether `ProtectHome=yes` hides `path` from the system service.
pub fn in_home(path: &Path) -> bool {
    ["/home", "/root", "/run/user"].iter().any(|home| path.starts_with(home))
}

/// `TimeoutStopSec=`: the drain, 5 s for turns stopped at its end, the adapters' 10 s to
/// deliver the last replies, and 15 s for the last cursor and the store's close (a database
/// another process holds makes them wait); never below the template's 60 s.
fn stop_timeout_s(drain_timeout_s: u64) -> u64 {
    drain_timeout_s.saturating_add(30).max(60)
}

/// The template with its `ExecStart=`, `HERALD_CONFIG` and `TimeoutStopSec=` lines replaced.
fn render(template: &str, exec: &str, environment: &str, stop_timeout_s: u64) -> String {
    let mut out = String::with_capacity(template.len() + 128);
    for line in template.lines() {
        let line = match line {
            l if l.starts_with("ExecStart=") => exec.to_owned(),
            l if l.starts_with("Environment=HERALD_CONFIG=") => environment.to_owned(),
            l if l.starts_with("TimeoutStopSec=") => format!("TimeoutStopSec={stop_timeout_s}s"),
            l => l.to_owned(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A path as one word of a unit file line: `\` and `"` escaped, `%` (specifiers) doubled,
/// quoted unless it is plain. `$` stays: systemd expands variables neither in `ExecStart=`'s
/// executable nor in `Environment=`.
fn unit_word(path: &Path) -> anyhow::Result<String> {
    let Some(text) = path.to_str() else {
        bail!("{} is not UTF-8; systemd cannot name it: move it", path.display());
    };
    if text.chars().any(char::is_control) {
        bail!("{text:?} holds a control character; systemd cannot name it: move it");
    }
    let word = text.replace('\\', "\\\\").replace('"', "\\\"").replace('%', "%%");
    let plain = text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:@,".contains(c));
    Ok(if plain { word } else { format!("\"{word}\"") })
}

/// `NAME=path` as one `Environment=` word.
fn env_word(name: &str, path: &Path) -> anyhow::Result<String> {
    let word = unit_word(path)?;
    Ok(match word.strip_prefix('"') {
        Some(quoted) => format!("\"{name}={quoted}"),
        None => format!("{name}={word}"),
    })
}

/// What is at a file's place compared with what install would write now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    /// Nothing there.
    Absent,
    /// Exactly what install would write.
    Current,
    /// Something else: the first line that differs, as installed and as install would write it.
    Outdated { installed: String, expected: String },
    /// The file could not be read.
    Unreadable(String),
}

/// Compares the file at `file.path` with `file.contents`.
pub fn state(file: &UnitFile) -> FileState {
    let installed = match fs::read_to_string(&file.path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return FileState::Absent,
        Err(e) => return FileState::Unreadable(e.to_string()),
    };
    if installed == file.contents {
        return FileState::Current;
    }
    let (mut have, mut want) = (installed.lines(), file.contents.lines());
    loop {
        match (have.next(), want.next()) {
            (Some(a), Some(b)) if a == b => continue,
            (a, b) => {
                let show = |line: Option<&str>| line.unwrap_or("(end of file)").to_owned();
                return FileState::Outdated { installed: show(a), expected: show(b) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_has_the_lines_install_replaces() {
        for unit in [SYSTEM_UNIT, USER_UNIT] {
            for prefix in ["ExecStart=", "Environment=HERALD_CONFIG=", "TimeoutStopSec="] {
                assert_eq!(unit.lines().filter(|l| l.starts_with(prefix)).count(), 1, "{prefix}");
            }
            assert!(unit.contains("TimeoutStopSec=60s\n"));
        }
    }

    #[test]
    fn rendering_replaces_paths_and_the_stop_timeout() {
        let exec = format!("ExecStart={} gateway", unit_word(Path::new("/opt/h/herald")).unwrap());
        let env =
            format!("Environment={}", env_word("HERALD_CONFIG", Path::new("/c.toml")).unwrap());
        let unit = render(SYSTEM_UNIT, &exec, &env, stop_timeout_s(30));
        assert!(unit.contains("\nExecStart=/opt/h/herald gateway\n"), "{unit}");
        assert!(unit.contains("\nEnvironment=HERALD_CONFIG=/c.toml\n"), "{unit}");
        assert!(unit.contains("\nTimeoutStopSec=60s\n"), "{unit}");
        assert!(!unit.contains("/usr/local/bin"), "{unit}");
        for template in [SYSTEM_UNIT, USER_UNIT] {
            assert!(template.contains("\nLimitNOFILE=65536\n"), "a descriptor limit above 1024");
        }
        assert_eq!(render(SYSUSERS, &exec, &env, 60), SYSUSERS);
        assert_eq!(stop_timeout_s(90), 120);
    }

    #[test]
    fn odd_paths_are_quoted_and_escaped() {
        let check = |path: &str, exec: &str, env: &str| {
            assert_eq!(unit_word(Path::new(path)).unwrap(), exec, "{path}");
            assert_eq!(env_word("C", Path::new(path)).unwrap(), env, "{path}");
        };
        check("/usr/bin/herald", "/usr/bin/herald", "C=/usr/bin/herald");
        check("/my bin/h", "\"/my bin/h\"", "\"C=/my bin/h\"");
        check("/100%/$x", "\"/100%%/$x\"", "\"C=/100%%/$x\"");
        check("/a\"b\\c", "\"/a\\\"b\\\\c\"", "\"C=/a\\\"b\\\\c\"");
        assert!(unit_word(Path::new("/a\nb")).is_err());
    }

    #[test]
    fn home_directories_are_hidden_from_the_system_service() {
        assert!(in_home(Path::new("/home/ann/.config/herald/config.toml")));
        assert!(in_home(Path::new("/root/herald.toml")));
        assert!(!in_home(Path::new("/etc/herald/config.toml")));
        assert!(!in_home(Path::new("/homes/x")));
    }
}
