//! `herald service install | uninstall | status`: the systemd unit that runs `herald gateway`,
//! as a system service (user `herald`, state in /var/lib/herald) or a user service.

mod files;
mod unit;

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::anyhow;

use crate::cli::{ServiceCommand, ServiceTarget};
use crate::config::{Env, Loaded};
use files::FileError;
pub use unit::{FileState, Host, Mode, ROOT_VAR, SYSTEMCTL_VAR, UnitFile};

/// Runs a `herald service` command.
pub fn run(
    command: ServiceCommand,
    loaded: &Loaded,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let host = Host::from_env(&Env::process());
    match command {
        ServiceCommand::Install { target, dry_run } => {
            install(mode(target), &host, loaded, dry_run, out)
        }
        ServiceCommand::Uninstall { target, dry_run } => {
            uninstall(mode(target), &host, dry_run, out)
        }
        ServiceCommand::Status { target } => status(mode(target), &host, loaded, out),
    }
}

/// The unit install would write for `mode` now, and how the installed one compares.
pub fn unit_state(
    mode: Mode,
    host: &Host,
    loaded: &Loaded,
) -> anyhow::Result<(UnitFile, FileState)> {
    let plan = unit::plan(mode, host, loaded)?;
    let unit = plan.files.into_iter().next().expect("every plan starts with its unit");
    let state = unit::state(&unit);
    Ok((unit, state))
}

fn mode(target: ServiceTarget) -> Mode {
    match (target.user, target.system) {
        (true, _) => Mode::User,
        (_, true) => Mode::System,
        // Whoever runs this as root means the machine's service; anyone else can only mean
        // their own.
        _ if running_as_root() => Mode::System,
        _ => Mode::User,
    }
}

fn running_as_root() -> bool {
    // /proc/self belongs to the process's effective user.
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn install(
    mode: Mode,
    host: &Host,
    loaded: &Loaded,
    dry_run: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let plan = unit::plan(mode, host, loaded)?;
    // A unit whose binary the service cannot see would fail at every start (203/EXEC).
    if mode == Mode::System && !dry_run && !host.is_test_root() && unit::in_home(&plan.exe) {
        anyhow::bail!(
            "this herald is {}, in a home directory, which the system service cannot see \
             (ProtectHome=yes): copy it to /usr/local/bin and run the install from there",
            plan.exe.display()
        );
    }
    if dry_run {
        for file in &plan.files {
            writeln!(out, "=== {}", file.path.display())?;
            out.write_all(file.contents.as_bytes())?;
        }
        writeln!(out, "===\nwould run: {}", command_line(mode, &["daemon-reload"]))?;
        return notes(mode, loaded, &plan, out).map(|()| ExitCode::SUCCESS);
    }
    let files: Vec<(&Path, &str)> =
        plan.files.iter().map(|f| (f.path.as_path(), f.contents.as_str())).collect();
    files::write_all(&files).map_err(|e| refusal(e, mode, "install"))?;
    for file in &plan.files {
        writeln!(out, "wrote {}", file.path.display())?;
    }
    report(out, mode, &["daemon-reload"], systemctl(host, mode, &["daemon-reload"]))?;
    notes(mode, loaded, &plan, out)?;
    writeln!(out, "next:")?;
    for (step, why) in next_steps(mode, &plan.config) {
        match why {
            "" => writeln!(out, "  {step}")?,
            why => writeln!(out, "  {step:<42} # {why}")?,
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The commands that make the installed unit run, each with why when that is not obvious.
fn next_steps(mode: Mode, config: &Path) -> Vec<(String, &'static str)> {
    let mut steps: Vec<(String, &'static str)> = Vec::new();
    if mode == Mode::System {
        steps.push(("systemd-sysusers".into(), "creates the user herald"));
        steps.push(("systemd-tmpfiles --create".into(), "creates /etc/herald, 0750 root:herald"));
    }
    if !config.exists() {
        let why = "then set [store] path and a platform";
        steps.push((format!("herald config example > {}", config.display()), why));
    }
    match mode {
        Mode::System => {
            let env = "install -m 600 /dev/null /etc/herald/env";
            steps.push((env.into(), "then TELEGRAM_BOT_TOKEN=... in it"));
            steps.push(("systemctl enable --now herald".into(), ""));
            steps.push(("journalctl -u herald -f".into(), "the logs"));
        }
        Mode::User => {
            steps.push(("systemctl --user enable --now herald".into(), ""));
            let linger = "keeps it running while you are logged out";
            steps.push(("loginctl enable-linger $USER".into(), linger));
            steps.push(("journalctl --user -u herald -f".into(), "the logs"));
        }
    }
    steps
}

/// What install cannot fix itself but the user should know.
fn notes(
    mode: Mode,
    loaded: &Loaded,
    plan: &unit::Plan,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if mode == Mode::User {
        return Ok(());
    }
    let config = &plan.config;
    if unit::in_home(&plan.exe) {
        writeln!(
            out,
            "note: this herald is {}, in a home directory, which the system service cannot see \
             (ProtectHome=yes); copy it to /usr/local/bin and install from there",
            plan.exe.display()
        )?;
    }
    if let Some(path) = loaded.path.as_deref().filter(|p| unit::in_home(p)) {
        writeln!(
            out,
            "note: {} is in a home directory, which the system service cannot read \
             (ProtectHome=yes); the unit reads {} instead: copy it there",
            path.display(),
            config.display()
        )?;
    }
    let store = &loaded.config.store.path;
    if loaded.config.store.url.is_none() && !store.starts_with(unit::STATE_DIR) {
        writeln!(
            out,
            "note: [store] path is {}, but the system service can write only under {dir}; \
             set [store] path = \"{dir}/state.db\" in {}",
            store.display(),
            config.display(),
            dir = unit::STATE_DIR,
        )?;
    }
    Ok(())
}

fn uninstall(
    mode: Mode,
    host: &Host,
    dry_run: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let present: Vec<PathBuf> =
        unit::paths(mode, host)?.into_iter().filter(|p| p.symlink_metadata().is_ok()).collect();
    if present.is_empty() {
        writeln!(out, "herald is not installed as a {} service; nothing to remove", mode.name())?;
        return Ok(ExitCode::SUCCESS);
    }
    let disable = ["disable", "--now", "herald"];
    if dry_run {
        writeln!(out, "would run: {}", command_line(mode, &disable))?;
        for path in &present {
            writeln!(out, "would remove {}", path.display())?;
        }
        writeln!(out, "would run: {}", command_line(mode, &["daemon-reload"]))?;
        return Ok(ExitCode::SUCCESS);
    }
    // Stopped and disabled first: systemd still knows the unit and its [Install] links.
    report(out, mode, &disable, systemctl(host, mode, &disable))?;
    let paths: Vec<&Path> = present.iter().map(PathBuf::as_path).collect();
    files::remove_all(&paths).map_err(|e| refusal(e, mode, "uninstall"))?;
    for path in &present {
        writeln!(out, "removed {}", path.display())?;
    }
    report(out, mode, &["daemon-reload"], systemctl(host, mode, &["daemon-reload"]))?;
    if mode == Mode::System {
        writeln!(out, "kept {} (the database), /etc/herald and the user herald", unit::STATE_DIR)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn status(
    mode: Mode,
    host: &Host,
    loaded: &Loaded,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let flag = mode.flag();
    for file in unit::plan(mode, host, loaded)?.files {
        let state = match unit::state(&file) {
            FileState::Absent => format!("not installed (herald service install {flag})"),
            FileState::Current => "current".to_owned(),
            FileState::Outdated { .. } => format!("outdated: run herald service install {flag}"),
            FileState::Unreadable(e) => format!("unreadable: {e}"),
        };
        writeln!(out, "{:<9} {}: {state}", file.role, file.path.display())?;
    }
    let active = match systemctl(host, mode, &["is-active", "herald"]) {
        Systemctl::Skipped => format!("unknown (systemctl not run: {ROOT_VAR} is set)"),
        // is-active exits non-zero for anything but "active" and still says what it is.
        Systemctl::Ran { output, .. } => output,
    };
    writeln!(out, "{:<9} {active}", "active")?;
    Ok(ExitCode::SUCCESS)
}

/// What running systemctl came to.
#[derive(Debug)]
enum Systemctl {
    /// Not run: the files are in a test root.
    Skipped,
    /// Its first line of output (stdout, else stderr) and whether it succeeded.
    Ran { ok: bool, output: String },
}

fn systemctl(host: &Host, mode: Mode, args: &[&str]) -> Systemctl {
    let Some(program) = &host.systemctl else { return Systemctl::Skipped };
    let mut command = Command::new(program);
    if mode == Mode::User {
        command.arg("--user");
    }
    match command.args(args).stdin(Stdio::null()).output() {
        Err(e) => Systemctl::Ran { ok: false, output: format!("cannot run {program}: {e}") },
        Ok(run) => {
            let first = |bytes: &[u8]| {
                let text = String::from_utf8_lossy(bytes);
                text.lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
            };
            let output = first(&run.stdout).or_else(|| first(&run.stderr));
            Systemctl::Ran {
                ok: run.status.success(),
                output: output.unwrap_or_else(|| format!("{program} exited with {}", run.status)),
            }
        }
    }
}

fn command_line(mode: Mode, args: &[&str]) -> String {
    let user = if mode == Mode::User { " --user" } else { "" };
    format!("systemctl{user} {}", args.join(" "))
}

/// Says what systemctl did; a failure is not fatal, the files are in place either way.
fn report(out: &mut dyn Write, mode: Mode, args: &[&str], ran: Systemctl) -> anyhow::Result<()> {
    let line = command_line(mode, args);
    match ran {
        Systemctl::Skipped => writeln!(out, "skipped {line} ({ROOT_VAR} is set)")?,
        Systemctl::Ran { ok: true, .. } => writeln!(out, "ran {line}")?,
        Systemctl::Ran { ok: false, output } => {
            writeln!(out, "{line} failed ({output}); run it yourself once systemd is running")?
        }
    }
    Ok(())
}

/// One line for a file that could not be written or removed, saying to use sudo when that
/// would help.
fn refusal(error: FileError, mode: Mode, verb: &str) -> anyhow::Error {
    match error.not_permitted() && mode == Mode::System {
        true => anyhow!(
            "cannot {} {}: permission denied; run it with sudo: sudo herald service {verb} --system",
            error.action,
            error.path.display()
        ),
        false => error.into(),
    }
}
