//! `herald service install | uninstall | status`, into a test root (`HERALD_SERVICE_ROOT`)
//! with a fake systemctl that records its arguments, and the written units checked by the
//! real `systemd-analyze`, `systemd-sysusers` and `systemd-tmpfiles`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{Run, World};

/// A world whose service files go under `root`, with a fake systemctl logging to `calls`.
struct Setup {
    world: World,
    root: PathBuf,
    calls: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let mut world = World::new();
        let root = world.dir().join("root");
        let calls = world.dir().join("systemctl-calls");
        let systemctl = world.dir().join("systemctl");
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in *is-active*) echo active;; esac\n",
            calls.display()
        );
        fs::write(&systemctl, script).unwrap();
        fs::set_permissions(&systemctl, fs::Permissions::from_mode(0o755)).unwrap();
        world.env("HERALD_SERVICE_ROOT", root.to_str().unwrap());
        world.env("HERALD_SYSTEMCTL", systemctl.to_str().unwrap());
        Setup { world, root, calls }
    }

    fn herald(&self, args: &[&str]) -> Run {
        self.world.herald(args)
    }

    /// What systemctl was asked to do, one call a line.
    fn calls(&self) -> String {
        fs::read_to_string(&self.calls).unwrap_or_default()
    }

    fn system_unit(&self) -> PathBuf {
        self.root.join("etc/systemd/system/herald.service")
    }

    fn user_unit(&self) -> PathBuf {
        let home = self.world.dir().join("home/.config/systemd/user/herald.service");
        self.root.join(home.strip_prefix("/").unwrap())
    }
}

/// The herald binary the test runs, as install resolves it.
fn herald_exe() -> PathBuf {
    fs::canonicalize(env!("CARGO_BIN_EXE_herald")).unwrap()
}

/// Every file under `dir`, relative to it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, found: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        for entry in entries {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => walk(base, &path, found),
                false => found.push(path.strip_prefix(base).unwrap().display().to_string()),
            }
        }
    }
    let mut found = Vec::new();
    walk(dir, dir, &mut found);
    found.sort();
    found
}

/// The `=== PATH` sections of a dry run: each path and the content printed for it.
fn sections(stdout: &str) -> Vec<(PathBuf, String)> {
    let mut sections: Vec<(PathBuf, String)> = Vec::new();
    for line in stdout.lines() {
        match line.strip_prefix("=== ") {
            Some(path) => sections.push((path.into(), String::new())),
            None if line == "===" => break,
            None => {
                let (_, text) = sections.last_mut().expect("a section before content");
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    sections
}

/// Runs `program ARGS`. A machine without it fails the test, saying why: a check that did not
/// run must not count as passed (scripts/test installs systemd's tools where they are missing).
fn tool(program: &str, args: &[&str], env: &[(&str, &Path)]) -> std::process::Output {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    match command.output() {
        Ok(output) => output,
        Err(e) => panic!("cannot run {program} here ({e}): this check did not run"),
    }
}

#[test]
fn a_dry_run_prints_every_file_with_this_machines_paths_and_writes_nothing() {
    let setup = Setup::new();
    let config = fs::canonicalize(&setup.world.config).unwrap();
    let out = setup.herald(&["service", "install", "--system", "--dry-run"]).ok();
    let printed = sections(&out);
    let paths: Vec<&Path> = printed.iter().map(|(p, _)| p.as_path()).collect();
    let etc = setup.root.join("etc");
    assert_eq!(
        paths,
        [
            setup.system_unit(),
            etc.join("sysusers.d/herald.conf"),
            etc.join("tmpfiles.d/herald.conf")
        ]
    );
    let unit = &printed[0].1;
    assert!(unit.contains(&format!("\nExecStart={} gateway\n", herald_exe().display())), "{unit}");
    assert!(unit.contains(&format!("\nEnvironment=HERALD_CONFIG={}\n", config.display())));
    assert!(unit.contains("\nUser=herald\n") && unit.contains("\nTimeoutStopSec=60s\n"));
    assert!(printed[1].1.contains("u herald -"), "{out}");
    assert!(printed[2].1.contains("d /etc/herald 0750 root herald -"), "{out}");
    assert!(out.contains("would run: systemctl daemon-reload"), "{out}");
    // The test config keeps its store outside /var/lib/herald, which the service cannot write.
    assert!(out.contains("set [store] path = \"/var/lib/herald/state.db\""), "{out}");

    let out = setup.herald(&["service", "install", "--user", "--dry-run"]).ok();
    let printed = sections(&out);
    assert_eq!(printed.len(), 1, "{out}");
    assert_eq!(printed[0].0, setup.user_unit());
    assert!(printed[0].1.contains(&format!("\nExecStart={} gateway\n", herald_exe().display())));
    assert!(printed[0].1.contains("\nWantedBy=default.target\n"), "{out}");
    assert!(out.contains("would run: systemctl --user daemon-reload"), "{out}");

    assert!(!setup.root.exists(), "a dry run wrote {:?}", files_under(&setup.root));
    assert_eq!(setup.calls(), "");
}

#[test]
fn install_writes_exactly_its_files_status_compares_them_and_uninstall_removes_them() {
    let setup = Setup::new();
    let expected = sections(&setup.herald(&["service", "install", "--system", "--dry-run"]).ok());
    let out = setup.herald(&["service", "install", "--system"]).ok();
    assert_eq!(
        files_under(&setup.root),
        [
            "etc/systemd/system/herald.service",
            "etc/sysusers.d/herald.conf",
            "etc/tmpfiles.d/herald.conf"
        ]
    );
    for (path, contents) in &expected {
        assert_eq!(&fs::read_to_string(path).unwrap(), contents, "{}", path.display());
        assert_eq!(fs::metadata(path).unwrap().permissions().mode() & 0o777, 0o644);
        assert!(out.contains(&format!("wrote {}", path.display())), "{out}");
    }
    assert_eq!(setup.calls(), "daemon-reload\n");
    for step in ["systemd-sysusers", "systemd-tmpfiles --create", "systemctl enable --now herald"] {
        assert!(out.contains(step), "{step}: {out}");
    }
    assert!(out.contains("journalctl -u herald -f"), "{out}");

    let status = setup.herald(&["service", "status", "--system"]).ok();
    assert_eq!(status.matches(": current").count(), 3, "{status}");
    assert!(status.contains("active    active"), "{status}");

    let unit = setup.system_unit();
    let old =
        fs::read_to_string(&unit).unwrap().replace("TimeoutStopSec=60s", "TimeoutStopSec=10s");
    fs::write(&unit, old).unwrap();
    let status = setup.herald(&["service", "status", "--system"]).ok();
    assert!(status.contains("outdated: run herald service install --system"), "{status}");

    let out = setup.herald(&["service", "uninstall", "--system", "--dry-run"]).ok();
    assert!(out.contains(&format!("would remove {}", unit.display())), "{out}");
    assert_eq!(files_under(&setup.root).len(), 3);

    let out = setup.herald(&["service", "uninstall", "--system"]).ok();
    assert_eq!(files_under(&setup.root), Vec::<String>::new(), "{out}");
    assert!(out.contains(&format!("removed {}", unit.display())), "{out}");
    assert!(out.contains("kept /var/lib/herald"), "{out}");
    assert_eq!(
        setup.calls(),
        "daemon-reload\nis-active herald\nis-active herald\ndisable --now herald\ndaemon-reload\n"
    );
    let out = setup.herald(&["service", "uninstall", "--system"]).ok();
    assert!(out.contains("not installed as a system service"), "{out}");
}

#[test]
fn a_user_install_writes_one_unit_and_says_how_to_keep_it_running() {
    let setup = Setup::new();
    let out = setup.herald(&["service", "install", "--user"]).ok();
    let home = setup.world.dir().join("home/.config/systemd/user/herald.service");
    assert_eq!(files_under(&setup.root), [home.strip_prefix("/").unwrap().display().to_string()]);
    assert_eq!(setup.calls(), "--user daemon-reload\n");
    assert!(out.contains("systemctl --user enable --now herald"), "{out}");
    assert!(out.contains("loginctl enable-linger $USER"), "{out}");
    assert!(!out.contains("note:"), "the user service may keep its store anywhere: {out}");
    setup.herald(&["service", "uninstall", "--user"]).ok();
    assert_eq!(files_under(&setup.root), Vec::<String>::new());
    assert_eq!(
        setup.calls(),
        "--user daemon-reload\n--user disable --now herald\n--user daemon-reload\n"
    );
}

#[test]
fn a_system_install_without_permission_is_refused_in_one_line_and_writes_nothing() {
    let setup = Setup::new();
    fs::create_dir(&setup.root).unwrap();
    fs::set_permissions(&setup.root, fs::Permissions::from_mode(0o555)).unwrap();
    // Root may write anywhere: run herald as nobody then, who may read the test's files only.
    let as_root = fs::metadata(setup.world.dir()).unwrap().uid() == 0;
    fs::set_permissions(setup.world.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
    command
        .args(["service", "install", "--system"])
        .env_clear()
        .env("HOME", setup.world.dir().join("home"))
        .env("HERALD_CONFIG", &setup.world.config)
        .env("HERALD_SERVICE_ROOT", &setup.root)
        .env("HERALD_SYSTEMCTL", "/bin/false");
    if as_root {
        command.uid(65534).gid(65534);
    }
    let output = command.output().unwrap();
    let run = Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    };
    let line = run.fails(1);
    assert_eq!(
        line,
        format!(
            "error: cannot write {}: permission denied; run it with sudo: sudo herald service \
             install --system",
            setup.root.join("etc").display()
        )
    );
    assert_eq!(fs::read_dir(&setup.root).unwrap().count(), 0);
}

#[test]
fn systemd_analyze_verifies_the_installed_units() {
    let setup = Setup::new();
    setup.herald(&["service", "install", "--system"]).ok();
    setup.herald(&["service", "install", "--user"]).ok();
    let version = tool("systemd-analyze", &["--version"], &[]);
    eprintln!("{}", String::from_utf8_lossy(&version.stdout).lines().next().unwrap_or(""));

    let verify = |unit: &Path, user: bool| {
        // The user manager needs a runtime directory; a private one will do.
        let runtime = tempfile::tempdir().unwrap();
        let mut args = vec!["verify", unit.to_str().unwrap()];
        if user {
            args.insert(0, "--user");
        }
        let output = tool("systemd-analyze", &args, &[("XDG_RUNTIME_DIR", runtime.path())]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && stderr.is_empty(), "{}: {stderr}", unit.display());
    };
    verify(&setup.system_unit(), false);
    verify(&setup.user_unit(), true);

    // A binary whose path needs quoting and escaping (a space, `%`, `$`): systemd must find it.
    let odd = Path::new(env!("CARGO_TARGET_TMPDIR")).join("service test/100% $HOME");
    fs::create_dir_all(&odd).unwrap();
    let binary = odd.join("herald");
    let _ = fs::remove_file(&binary);
    fs::hard_link(env!("CARGO_BIN_EXE_herald"), &binary)
        .or_else(|_| fs::copy(env!("CARGO_BIN_EXE_herald"), &binary).map(drop))
        .unwrap();
    let output = Command::new(&binary)
        .args(["service", "install", "--system"])
        .env_clear()
        .env("HOME", setup.world.dir().join("home"))
        .env("HERALD_CONFIG", &setup.world.config)
        .env("HERALD_SERVICE_ROOT", setup.world.dir().join("odd-root"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let unit = setup.world.dir().join("odd-root/etc/systemd/system/herald.service");
    let text = fs::read_to_string(&unit).unwrap();
    assert!(text.contains("ExecStart=\"") && text.contains("100%% $HOME"), "{text}");
    verify(&unit, false);
    fs::remove_file(&binary).unwrap();
}

#[test]
fn the_system_unit_exposure_is_at_most_2() {
    let setup = Setup::new();
    setup.herald(&["service", "install", "--system"]).ok();
    let unit = setup.system_unit();
    let args = ["security", "--offline=yes", unit.to_str().unwrap()];
    let output = tool("systemd-analyze", &args, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("Overall exposure level for herald.service:"))
        .unwrap_or_else(|| {
            panic!("no exposure line: {stdout}{}", String::from_utf8_lossy(&output.stderr))
        });
    let level: f64 =
        line.split(':').nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
    eprintln!("{}", line.trim());
    assert!(level <= 2.0, "{line}");
}

#[test]
fn sysusers_and_tmpfiles_create_the_user_and_etc_herald() {
    let setup = Setup::new();
    setup.herald(&["service", "install", "--system"]).ok();
    if fs::metadata(setup.world.dir()).unwrap().uid() != 0 {
        eprintln!("SKIPPED: systemd-tmpfiles needs root to give /etc/herald to the group herald");
        return;
    }
    let root = format!("--root={}", setup.root.display());
    let sysusers = tool("systemd-sysusers", &[root.as_str()], &[]);
    assert!(sysusers.status.success(), "{sysusers:?}");
    let passwd = fs::read_to_string(setup.root.join("etc/passwd")).unwrap();
    let herald = passwd.lines().find(|l| l.starts_with("herald:")).expect("the user herald");
    assert!(herald.ends_with(":/var/lib/herald:/usr/sbin/nologin"), "{herald}");
    let group = fs::read_to_string(setup.root.join("etc/group")).unwrap();
    let gid: u32 = group
        .lines()
        .find_map(|l| l.strip_prefix("herald:x:"))
        .unwrap()
        .trim_end_matches(':')
        .parse()
        .unwrap();

    let tmpfiles = tool("systemd-tmpfiles", &[root.as_str(), "--create"], &[]);
    assert!(tmpfiles.status.success(), "{tmpfiles:?}");
    let etc_herald = fs::metadata(setup.root.join("etc/herald")).unwrap();
    assert_eq!(etc_herald.permissions().mode() & 0o7777, 0o750);
    assert_eq!((etc_herald.uid(), etc_herald.gid()), (0, gid));
}
