//! Finding, reading and resolving the config file: the lookup order of SPEC section 3,
//! `~` expansion, and the default store path under `$HERALD_HOME`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError, validate};

/// The file checked last, for a system-wide install.
const SYSTEM_CONFIG: &str = "/etc/herald/config.toml";

/// Where configuration reads environment variables: the process, or a fixed set in tests.
#[derive(Debug, Clone, Default)]
pub struct Env {
    fixed: Option<HashMap<String, OsString>>,
}

impl Env {
    /// The process's environment.
    pub fn process() -> Env {
        Env { fixed: None }
    }

    /// Only these variables.
    #[cfg(test)]
    pub(crate) fn fixed(vars: &[(&str, &str)]) -> Env {
        let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), OsString::from(v))).collect();
        Env { fixed: Some(vars) }
    }

    /// A variable's value; unset and empty are the same.
    pub fn var(&self, name: &str) -> Option<OsString> {
        let value = match &self.fixed {
            Some(vars) => vars.get(name).cloned(),
            None => std::env::var_os(name),
        };
        value.filter(|v| !v.is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        let home = self.var("HOME").map(PathBuf::from);
        match &self.fixed {
            Some(_) => home,
            None => home.or_else(dirs::home_dir),
        }
    }

    /// An XDG base directory: the variable when it is absolute, else `~/{fallback}`.
    fn xdg(&self, var: &str, fallback: &str) -> Option<PathBuf> {
        let set = self.var(var).map(PathBuf::from).filter(|p| p.is_absolute());
        set.or_else(|| self.home().map(|h| h.join(fallback)))
    }
}

/// A configuration and the file it came from (`None`: no file was found, defaults apply).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The file read, if any.
    pub path: Option<PathBuf>,
    /// The configuration, paths resolved.
    pub config: Config,
}

/// Finds and reads the config: `explicit` (`--config`), else `$HERALD_CONFIG`, else
/// `$XDG_CONFIG_HOME/herald/config.toml`, else `/etc/herald/config.toml`, else defaults.
pub fn load(explicit: Option<&Path>, env: &Env) -> Result<Loaded, ConfigError> {
    let Some(path) = locate(explicit, env)? else {
        let config = resolve_paths(Config::default(), None, env)?;
        return Ok(Loaded { path: None, config });
    };
    let source = fs::read_to_string(&path).map_err(|e| {
        ConfigError::new(format!("could not read config file {}: {e}", path.display()))
    })?;
    let config = parse(&source, &path, env)?;
    Ok(Loaded { path: Some(path), config })
}

/// Parses, resolves and checks the text of `file`.
pub fn parse(source: &str, file: &Path, env: &Env) -> Result<Config, ConfigError> {
    let config: Config =
        toml::from_str(source).map_err(|e| ConfigError::from_toml(file, source, &e))?;
    let config = resolve_paths(config, file.parent(), env)?;
    validate::check(&config, file, source)?;
    Ok(config)
}

/// The config file to read, or `None` when no candidate exists. A file named explicitly,
/// by flag or variable, must exist: a typo there should not silently mean defaults.
fn locate(explicit: Option<&Path>, env: &Env) -> Result<Option<PathBuf>, ConfigError> {
    let named = match explicit {
        Some(path) => Some((path.to_owned(), "--config")),
        None => env.var("HERALD_CONFIG").map(|p| (PathBuf::from(p), "$HERALD_CONFIG")),
    };
    if let Some((path, origin)) = named {
        let path = expand_tilde(&path, env)?;
        if !path.exists() {
            return Err(ConfigError::new(format!(
                "config file {} (from {origin}) does not exist; check the path, or run \
                 `herald config example > {}` to start one",
                path.display(),
                path.display()
            )));
        }
        return Ok(Some(path));
    }
    Ok(candidates(env).into_iter().find(|p| p.is_file()))
}

/// The files looked for when none is named, in order.
pub fn candidates(env: &Env) -> Vec<PathBuf> {
    let user = env.xdg("XDG_CONFIG_HOME", ".config").map(|d| d.join("herald").join("config.toml"));
    user.into_iter().chain([PathBuf::from(SYSTEM_CONFIG)]).collect()
}

/// Expands `~` and makes relative paths relative to the config file's directory.
fn resolve_paths(
    mut config: Config,
    base: Option<&Path>,
    env: &Env,
) -> Result<Config, ConfigError> {
    let resolve = |path: &Path| -> Result<PathBuf, ConfigError> {
        let path = expand_tilde(path, env)?;
        Ok(match base {
            Some(base) if path.is_relative() => base.join(path),
            _ => path,
        })
    };
    let path_set = !config.store.path.as_os_str().is_empty();
    if let Some(url) = config.store.url.take() {
        if path_set {
            return Err(ConfigError::new(
                "[store] sets both path and url; keep one (url = \"sqlite://PATH\" is the same as path)",
            ));
        }
        match url.strip_prefix("sqlite://") {
            Some("") => {
                return Err(ConfigError::new(
                    "[store] url = \"sqlite://\" names no file; write sqlite://PATH, or leave url out for the default",
                ));
            }
            Some(file) => config.store.path = PathBuf::from(file),
            None => config.store.url = Some(url),
        }
    }
    config.store.path = if config.store.path.as_os_str().is_empty() {
        herald_home(env)?.join("state.db")
    } else {
        resolve(&config.store.path)?
    };
    if let Some(file) = &config.agent.persona_file {
        config.agent.persona_file = Some(resolve(file)?);
    }
    Ok(config)
}

/// `$HERALD_HOME`, else the XDG data directory's `herald`.
fn herald_home(env: &Env) -> Result<PathBuf, ConfigError> {
    if let Some(home) = env.var("HERALD_HOME") {
        return expand_tilde(Path::new(&home), env);
    }
    env.xdg("XDG_DATA_HOME", ".local/share").map(|d| d.join("herald")).ok_or_else(|| {
        ConfigError::new("cannot find the home directory; set HOME or HERALD_HOME, or [store] path")
    })
}

/// `~` and `~/rest` become the home directory; other paths are kept.
fn expand_tilde(path: &Path, env: &Env) -> Result<PathBuf, ConfigError> {
    let Ok(rest) = path.strip_prefix("~") else { return Ok(path.to_owned()) };
    let home = env.home().ok_or_else(|| {
        ConfigError::new(format!(
            "cannot expand `~` in {}: the home directory is unknown; set HOME or write the full path",
            path.display()
        ))
    })?;
    Ok(if rest.as_os_str().is_empty() { home } else { home.join(rest) })
}
