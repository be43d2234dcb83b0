//! `ate-configguard`: check a ConfigMap/Secret transition, or the
//! manifests that roll a service out, before applying them.
//!
//! Exit codes: 0 safe, 1 unsafe transition found, 2 unusable input.

mod ci;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ate_configguard::rollout::{self, RolloutOptions, Waiver};
use ate_configguard::{
    CheckInput, Deletion, InputError, LoadOptions, Manifests, Report, Source, check, drift,
    load_paths, load_str,
    manifest::{Inventory, inventory, parse_object_id, parse_retired_key, unplaced_namespace},
    text::{decode_text, parse_selector, read_text},
};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "ate-configguard",
    version,
    about = "Fail-closed guard for ConfigMap/Secret migrations (names only, never values)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Text,
    Json,
    /// GitHub workflow annotations (`::error file=...,line=...::...`).
    Github,
    /// SARIF 2.1.0, for code scanning.
    Sarif,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check a transition: exit 0 safe, 1 unsafe, 2 unusable input.
    Check(CheckArgs),
    /// Check the manifests that roll workloads out: exit 0 safe, 1 a rule
    /// failed, 2 unusable input. Rules: probe-split, liveness-first,
    /// prestop, grace-budget, lb-drain, image-identity, headroom,
    /// single-writer. ConfigMaps and Secrets are skipped unread.
    Rollout {
        /// Files or directories of manifests (`-`: standard input).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Namespace for manifests without one [default: default].
        #[arg(long, default_value = "default")]
        namespace: String,
        /// An unknown kind whose `spec.template` pod template should be
        /// checked (Rollout, Rollout.argoproj.io).
        #[arg(long = "allow-kind", num_args = 1..)]
        allow_kind: Vec<String>,
        /// Waive a rule: CODE, or CODE=WORKLOAD (NAME, NAMESPACE/NAME or
        /// KIND/NAMESPACE/NAME). Every waived finding is still listed.
        #[arg(long, num_args = 1..)]
        allow: Vec<String>,
        /// Seconds the grace period must leave over preStop + drain wait.
        #[arg(long = "grace-margin", default_value_t = 5)]
        grace_margin: u32,
        /// The environment variable holding the in-flight drain wait
        /// (seconds).
        #[arg(long = "drain-timeout-env", default_value = "ATE_DRAIN_TIMEOUT_SECS")]
        drain_timeout_env: String,
        /// A mutable image tag fails instead of warning.
        #[arg(long = "require-digest")]
        require_digest: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Print the rollback plan of a live state (`kubectl get
    /// deploy,sts,ds,pod -o yaml`) as JSON: per container, the image it
    /// runs now (by digest where the pods say) and the `kubectl set image`
    /// command that restores it. Runs nothing.
    RollbackPlan {
        /// Files or directories of the live state (`-`: standard input).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Namespace for objects without one.
        #[arg(long, default_value = "default")]
        namespace: String,
    },
    /// Print the names-only inventory (kind, namespace, name, key names, a Secret's type).
    Inventory {
        /// Files or directories of manifests (`-`: standard input).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Namespace for manifests without one (or with `namespace: ""`).
        #[arg(long, default_value = "default")]
        namespace: String,
        /// An unknown kind whose pod templates may be read, as for `check`:
        /// the same manifests load the same way for both.
        #[arg(long = "allow-kind", num_args = 1..)]
        allow_kind: Vec<String>,
    },
    /// Check compiled-in defaults against a base ConfigMap and overlays.
    Drift {
        /// The program's defaults: a JSON/YAML map of key to string.
        #[arg(long)]
        defaults: PathBuf,
        /// The base ConfigMap manifest.
        #[arg(long)]
        base: PathBuf,
        /// Strategic-merge patches over the base.
        #[arg(long, num_args = 1..)]
        overlay: Vec<PathBuf>,
        /// A key whose value must never be compared or printed.
        #[arg(long = "secret-key", num_args = 1..)]
        secret_key: Vec<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
}

impl Command {
    /// The output format asked for, where the command has one.
    fn format(&self) -> Option<Format> {
        match self {
            Command::Check(args) => Some(args.format),
            Command::Rollout { format, .. } | Command::Drift { format, .. } => Some(*format),
            Command::RollbackPlan { .. } | Command::Inventory { .. } => None,
        }
    }
}

/// The arguments of `check`.
#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// Current (serving) state: files or directories of manifests (`-`:
    /// standard input, e.g. piped from `kubectl get ... -o yaml`).
    #[arg(long, num_args = 1.., required = true)]
    current: Vec<PathBuf>,
    /// Proposed state: the manifests about to be applied (`-`: standard
    /// input).
    #[arg(long, num_args = 1.., required = true)]
    proposed: Vec<PathBuf>,
    /// A previous names-only inventory (from `inventory`).
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// Every current object absent from the proposed input is deleted, in
    /// the namespaces the proposed input touches (as `kubectl apply
    /// --prune`), except kube-root-ca.crt, which the control plane keeps,
    /// one annotated `helm.sh/resource-policy: keep` or (Argo CD)
    /// `argocd.argoproj.io/sync-options: Prune=false`, hooks, and, in a
    /// live dump, objects the applier does not own (ownerReferences, or
    /// no last-applied annotation, apply manager, Helm or Argo CD
    /// tracking: written by a Job or a controller).
    #[arg(long, conflicts_with = "delete")]
    prune: bool,
    /// With --prune, prune only objects whose labels match this
    /// selector, as `kubectl apply --prune -l` (`app=web,tier`).
    #[arg(long = "prune-selector", requires = "prune")]
    prune_selector: Option<String>,
    /// An object the proposed state deletes: KIND/NAMESPACE/NAME.
    #[arg(long, num_args = 1..)]
    delete: Vec<String>,
    /// A key the proposed state removes on purpose: KIND/NAMESPACE/NAME/KEY.
    /// A bulk load (envFrom, a volume without items) that loses it is a
    /// warning, not a failure; a reference to it by name still fails.
    #[arg(long = "retire-key", num_args = 1..)]
    retire_key: Vec<String>,
    /// Namespace for manifests without one (or with `namespace: ""`)
    /// [default: default]. Left out,
    /// manifests without one that would land where the other state holds
    /// nothing (`helm template` output against `kubectl get -n prod`)
    /// are unusable input: name the namespace they are applied to.
    #[arg(long)]
    namespace: Option<String>,
    /// An unknown kind whose pod templates, containers or Secret and
    /// ConfigMap references should be read: of any group (Rollout) or
    /// of one (Rollout.argoproj.io).
    #[arg(long = "allow-kind", num_args = 1..)]
    allow_kind: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// List every warning about an optional reference that would not
    /// resolve (text output counts them on one line by default).
    #[arg(long = "list-warnings")]
    list_warnings: bool,
}

/// `-`: standard input, as in `kubectl get deploy,cm,secret -o yaml |
/// ate-configguard check --current - --proposed rendered/`.
const STDIN: &str = "-";

/// What names standard input in reports and errors.
const STDIN_NAME: &str = "<stdin>";

/// Reads standard input at most once: a second `-` is an input error
/// (it would read nothing, which must never pass as an empty state).
#[derive(Default)]
struct Stdin {
    taken: bool,
}

impl Stdin {
    fn read(&mut self) -> Result<String, InputError> {
        if std::mem::replace(&mut self.taken, true) {
            return Err(InputError::Io {
                path: STDIN.into(),
                message: "standard input can be read once; give `-` to one option only".into(),
            });
        }
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| InputError::Io {
                path: STDIN_NAME.into(),
                message: e.to_string(),
            })?;
        decode_text(bytes, STDIN_NAME)
    }
}

/// A file's text, or standard input's for `-`.
fn read(path: &Path, stdin: &mut Stdin) -> Result<String, InputError> {
    if path.as_os_str() == STDIN {
        return stdin.read();
    }
    read_text(path)
}

/// `load_paths`, with `-` read from standard input.
fn load(
    paths: &[PathBuf],
    options: &LoadOptions,
    stdin: &mut Stdin,
) -> Result<Manifests, InputError> {
    let files: Vec<PathBuf> = paths
        .iter()
        .filter(|p| p.as_os_str() != STDIN)
        .cloned()
        .collect();
    let mut out = load_paths(&files, options)?;
    for _ in paths.iter().filter(|p| p.as_os_str() == STDIN) {
        out.extend(load_str(&stdin.read()?, STDIN_NAME, options)?);
    }
    Ok(out)
}

/// How a path is named in reports (`<stdin>` for `-`).
fn display(path: &Path) -> String {
    if path.as_os_str() == STDIN {
        STDIN_NAME.into()
    } else {
        path.display().to_string()
    }
}

/// Writes `text` to standard output. A reader that has gone away (`|
/// head`) is no error: it took what it wanted, and the exit code still
/// carries the verdict. Any other failure to write is (a report that could
/// not be written must not pass for one that was).
fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}

/// Writes a message to standard error; one that cannot be written (stderr
/// closed) is dropped rather than a panic.
fn write_stderr(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
}

/// Writes `what` (`text`) to standard output: `None` if it was written (or
/// its reader left), else exit code 2 with the error on standard error.
fn output(what: &str, text: &str) -> Option<ExitCode> {
    let e = write_stdout(text).err()?;
    write_stderr(&format!("error: cannot write the {what}: {e}"));
    Some(ExitCode::from(2))
}

/// `load`, for the rollout gate.
fn load_fleet(
    paths: &[PathBuf],
    options: &LoadOptions,
    stdin: &mut Stdin,
) -> Result<rollout::Fleet, InputError> {
    let files: Vec<PathBuf> = paths
        .iter()
        .filter(|p| p.as_os_str() != STDIN)
        .cloned()
        .collect();
    let mut out = if files.is_empty() {
        rollout::Fleet::default()
    } else {
        rollout::load_paths(&files, options)?
    };
    for _ in paths.iter().filter(|p| p.as_os_str() == STDIN) {
        out.extend(rollout::load_str(&stdin.read()?, STDIN_NAME, options)?);
    }
    Ok(out)
}

/// The summary a check's GitHub annotations end with.
fn check_summary(report: &Report) -> String {
    format!(
        "{} workload(s) current and {} proposed, {} reference(s) checked",
        report.workloads_current, report.workloads_proposed, report.references_checked
    )
}

/// The summary a drift check's annotations end with.
fn drift_summary(report: &Report) -> String {
    format!("{} key(s) compared", report.references_checked)
}

/// The summary a rollout check's annotations end with.
fn rollout_summary(report: &Report) -> String {
    format!(
        "{} workload(s), {} container(s) checked",
        report.workloads_checked, report.references_checked
    )
}

fn emit(
    report: &Report,
    format: Format,
    text: fn(&Report) -> String,
    summary: fn(&Report) -> String,
) -> ExitCode {
    let written = match format {
        Format::Text => output("report", &text(report)),
        Format::Json => match serde_json::to_string_pretty(report) {
            Ok(json) => output("report", &format!("{json}\n")),
            Err(e) => {
                write_stderr(&format!("error: cannot encode the report: {e}"));
                return ExitCode::from(2);
            }
        },
        Format::Github => output("report", &ci::github(report, &summary(report))),
        Format::Sarif => match ci::sarif(report) {
            Ok(log) => output("report", &log),
            Err(e) => {
                write_stderr(&format!("error: cannot encode the report: {e}"));
                return ExitCode::from(2);
            }
        },
    };
    written.unwrap_or(ExitCode::from(report.exit_code() as u8))
}

/// `check`: loads both states (and the inventory), checks the
/// transition, and prints the report.
fn run_check(args: CheckArgs, stdin: &mut Stdin) -> Result<ExitCode, InputError> {
    let CheckArgs {
        current,
        proposed,
        inventory: inv,
        prune,
        delete,
        retire_key,
        namespace,
        allow_kind,
        format,
        list_warnings,
        prune_selector,
    } = args;
    let chosen = namespace.is_some();
    let options = LoadOptions {
        default_namespace: namespace.unwrap_or_else(|| "default".into()),
        allow_kinds: allow_kind.into_iter().collect(),
        prune_selector: prune_selector
            .as_deref()
            .map(parse_selector)
            .transpose()?
            .unwrap_or_default(),
    };
    let inventory = match inv {
        None => None,
        Some(path) => {
            let text = read(&path, stdin)?;
            Some(Inventory::from_json(&text, &display(&path))?)
        }
    };
    let (current, proposed) = (
        load(&current, &options, stdin)?,
        load(&proposed, &options, stdin)?,
    );
    if !chosen && let Some(e) = unplaced_namespace(&current, &proposed, &options.default_namespace)
    {
        return Err(e);
    }
    let input = CheckInput {
        current,
        proposed,
        inventory,
        deletion: if prune {
            Deletion::Prune
        } else {
            Deletion::Listed
        },
        delete: delete
            .iter()
            .map(|d| parse_object_id(d))
            .collect::<Result<_, _>>()?,
        retired: retire_key
            .iter()
            .map(|r| parse_retired_key(r))
            .collect::<Result<_, _>>()?,
    };
    let text = if list_warnings {
        Report::to_text_all
    } else {
        Report::to_text
    };
    Ok(emit(&check(&input)?, format, text, check_summary))
}

fn run(cli: Cli) -> Result<ExitCode, InputError> {
    let mut stdin = Stdin::default();
    match cli.command {
        Command::Check(args) => run_check(args, &mut stdin),
        Command::Rollout {
            paths,
            namespace,
            allow_kind,
            allow,
            grace_margin,
            drain_timeout_env,
            require_digest,
            format,
        } => {
            let options = LoadOptions {
                default_namespace: namespace,
                allow_kinds: allow_kind.into_iter().collect(),
                ..LoadOptions::default()
            };
            let mut gate = RolloutOptions::default();
            gate.grace_margin = i64::from(grace_margin);
            gate.drain_timeout_env = drain_timeout_env;
            gate.require_digest = require_digest;
            gate.allow = allow
                .iter()
                .map(|a| Waiver::parse(a))
                .collect::<Result<_, _>>()?;
            let fleet = load_fleet(&paths, &options, &mut stdin)?;
            let report = rollout::rollout(&fleet, &gate)?;
            Ok(emit(
                &report,
                format,
                Report::to_rollout_text,
                rollout_summary,
            ))
        }
        Command::RollbackPlan { paths, namespace } => {
            let options = LoadOptions {
                default_namespace: namespace,
                ..LoadOptions::default()
            };
            let plan = rollout::rollback_plan(&load_fleet(&paths, &options, &mut stdin)?);
            match serde_json::to_string_pretty(&plan) {
                Ok(json) => {
                    Ok(output("rollback plan", &format!("{json}\n")).unwrap_or(ExitCode::SUCCESS))
                }
                Err(e) => {
                    write_stderr(&format!("error: cannot encode the rollback plan: {e}"));
                    Ok(ExitCode::from(2))
                }
            }
        }
        Command::Inventory {
            paths,
            namespace,
            allow_kind,
        } => {
            let options = LoadOptions {
                default_namespace: namespace,
                allow_kinds: allow_kind.into_iter().collect(),
                ..LoadOptions::default()
            };
            let inv = inventory(&load(&paths, &options, &mut stdin)?);
            match serde_json::to_string_pretty(&inv) {
                Ok(json) => {
                    Ok(output("inventory", &format!("{json}\n")).unwrap_or(ExitCode::SUCCESS))
                }
                Err(e) => {
                    write_stderr(&format!("error: cannot encode the inventory: {e}"));
                    Ok(ExitCode::from(2))
                }
            }
        }
        Command::Drift {
            defaults,
            base,
            overlay,
            secret_key,
            format,
        } => {
            let defaults_text = read(&defaults, &mut stdin)?;
            let base_text = read(&base, &mut stdin)?;
            let overlay_texts: Vec<(String, String)> = overlay
                .iter()
                .map(|p| read(p, &mut stdin).map(|t| (t, display(p))))
                .collect::<Result<_, _>>()?;
            let defaults_name = display(&defaults);
            let base_name = display(&base);
            let overlays: Vec<Source<'_>> = overlay_texts
                .iter()
                .map(|(t, n)| Source { text: t, name: n })
                .collect();
            let secret: BTreeSet<String> = secret_key.into_iter().collect();
            let report = drift(
                Source {
                    text: &defaults_text,
                    name: &defaults_name,
                },
                Source {
                    text: &base_text,
                    name: &base_name,
                },
                &overlays,
                &secret,
            )?;
            Ok(emit(&report, format, Report::to_drift_text, drift_summary))
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // With `--format json`, unusable input is a JSON document on stdout
    // too, so a pipeline that parses the report gets one either way.
    let format = cli.command.format();
    let json = matches!(format, Some(Format::Json));
    let github = matches!(format, Some(Format::Github));
    let sarif = matches!(format, Some(Format::Sarif));
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            write_stderr(&format!("error: {e}"));
            if sarif && let Ok(log) = ci::sarif_unusable(&e.to_string()) {
                let _ = write_stdout(&log);
            }
            if github {
                let _ = write_stdout(&format!(
                    "::error title=unusable-input::{}\n",
                    e.to_string().replace('%', "%25").replace('\n', "%0A")
                ));
            }
            if json {
                let doc = serde_json::json!({
                    "result": "unusable_input",
                    "exit_code": InputError::EXIT_CODE,
                    "error": e.to_string(),
                });
                // Exit 2 whether or not it could be written.
                let _ = write_stdout(&format!("{doc:#}\n"));
            }
            ExitCode::from(InputError::EXIT_CODE as u8)
        }
    }
}
