//! The previous release's example services, built from the git history:
//! the commit `compat/baseline` names, exported with `git archive` and
//! built with its own `Cargo.lock` (`--locked`) in a target dir of its
//! own. The binaries are kept under `target/compat/COMMIT/bin` (about
//! 130 MB) and reused; the build dir (about 1.2 GB) is removed once they
//! are copied out.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The release and commit `compat/baseline` names.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub release: String,
    pub commit: String,
    /// `axum-service`, then `actix-service`, built from `commit`.
    pub services: [PathBuf; 2],
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Reads `compat/baseline`: `release X.Y.Z` and `commit SHA` lines,
/// `#` comments.
fn read_pin() -> (String, String) {
    let path = root().join("compat/baseline");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let field = |name: &str| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("{} has no `{name}` line", path.display()))
    };
    let commit = field("commit ");
    assert!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{}: commit {commit:?} is not a full 40-digit SHA",
        path.display()
    );
    (field("release "), commit)
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(40).collect();
        panic!(
            "{what} failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

/// The baseline's services, built once per process (and kept between
/// runs).
pub fn baseline() -> &'static Baseline {
    static BUILT: OnceLock<Baseline> = OnceLock::new();
    BUILT.get_or_init(build)
}

fn build() -> Baseline {
    let (release, commit) = read_pin();
    let root = root();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let cache = target.join("compat").join(&commit);
    let bin = cache.join("bin");
    let names = ["axum-service", "actix-service"];
    let services = names.map(|n| bin.join(n));
    if services.iter().all(|p| p.is_file()) {
        return Baseline {
            release,
            commit,
            services,
        };
    }
    let known = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        known,
        "the baseline commit {commit} (release {release}, compat/baseline) is not in \
         this clone: the version-skew test builds it from the git history (after a \
         shallow clone, run `git fetch --unshallow`)"
    );
    let src = cache.join("src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).unwrap();
    let tar = cache.join("src.tar");
    run(
        Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(["archive", "--format=tar", "-o"])
            .arg(&tar)
            .arg(&commit),
        &format!("git archive {commit}"),
    );
    run(
        Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&src),
        "tar -x of the baseline",
    );
    let _ = std::fs::remove_file(&tar);
    let build_dir = cache.join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "version skew: building release {release} ({commit}) in {}",
        src.display()
    );
    run(
        Command::new(cargo)
            .current_dir(&src)
            .args([
                "build",
                "-p",
                "ate-examples",
                "--bins",
                "--locked",
                "--target-dir",
            ])
            .arg(&build_dir)
            // The baseline is built as it was released, not linted again
            // under this build's flags.
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env("CARGO_INCREMENTAL", "0")
            .env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only"),
        &format!("cargo build of release {release} ({commit})"),
    );
    std::fs::create_dir_all(&bin).unwrap();
    for (name, to) in names.iter().zip(&services) {
        // Copied, then renamed: a copy cut short is never taken for a
        // binary by the next run.
        let part = to.with_extension("part");
        std::fs::copy(build_dir.join("debug").join(name), &part).unwrap();
        std::fs::rename(&part, to).unwrap();
    }
    let _ = std::fs::remove_dir_all(&build_dir);
    let _ = std::fs::remove_dir_all(&src);
    Baseline {
        release,
        commit,
        services,
    }
}
