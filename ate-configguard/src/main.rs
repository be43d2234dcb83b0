//! `ate-configguard`: check a ConfigMap/Secret transition before applying it.
//!
//! Exit codes: 0 safe, 1 unsafe transition found, 2 unusable input.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use ate_configguard::{
    CheckInput, Deletion, InputError, Inventory, LoadOptions, Report, Source, check, drift,
    inventory, load_paths, parse_object_id,
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
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check a transition: exit 0 safe, 1 unsafe, 2 unusable input.
    Check {
        /// Current (serving) state: files or directories of manifests.
        #[arg(long, num_args = 1.., required = true)]
        current: Vec<PathBuf>,
        /// Proposed state: the manifests about to be applied.
        #[arg(long, num_args = 1.., required = true)]
        proposed: Vec<PathBuf>,
        /// A previous names-only inventory (from `inventory`).
        #[arg(long)]
        inventory: Option<PathBuf>,
        /// Every current object absent from the proposed input is deleted, in
        /// the namespaces the proposed input touches (as `kubectl apply
        /// --prune`), except kube-root-ca.crt, which the control plane keeps.
        #[arg(long, conflicts_with = "delete")]
        prune: bool,
        /// An object the proposed state deletes: KIND/NAMESPACE/NAME.
        #[arg(long, num_args = 1..)]
        delete: Vec<String>,
        /// Namespace for manifests without one.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// An unknown kind whose pod templates should be read (e.g. Rollout).
        #[arg(long = "allow-kind", num_args = 1..)]
        allow_kind: Vec<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Print the names-only inventory (kind, namespace, name, key names).
    Inventory {
        /// Files or directories of manifests.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Namespace for manifests without one.
        #[arg(long, default_value = "default")]
        namespace: String,
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

fn read(path: &PathBuf) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|e| InputError::Io {
        path: path.display().to_string(),
        message: e.kind().to_string(),
    })
}

fn emit(report: &Report, format: Format, text: fn(&Report) -> String) -> ExitCode {
    match format {
        Format::Text => print!("{}", text(report)),
        Format::Json => match serde_json::to_string_pretty(report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::from(2);
            }
        },
    }
    ExitCode::from(report.exit_code() as u8)
}

fn run(cli: Cli) -> Result<ExitCode, InputError> {
    match cli.command {
        Command::Check {
            current,
            proposed,
            inventory: inv,
            prune,
            delete,
            namespace,
            allow_kind,
            format,
        } => {
            let options = LoadOptions {
                default_namespace: namespace,
                allow_kinds: allow_kind.into_iter().collect(),
            };
            let inventory = match inv {
                None => None,
                Some(path) => {
                    let text = read(&path)?;
                    Some(serde_json::from_str::<Inventory>(&text).map_err(|e| {
                        InputError::Parse {
                            file: path.display().to_string(),
                            location: format!("line {} column {}", e.line(), e.column()),
                            message: "not an inventory (see `ate-configguard inventory`)".into(),
                        }
                    })?)
                }
            };
            let input = CheckInput {
                current: load_paths(&current, &options)?,
                proposed: load_paths(&proposed, &options)?,
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
            };
            Ok(emit(&check(&input)?, format, Report::to_text))
        }
        Command::Inventory { paths, namespace } => {
            let options = LoadOptions {
                default_namespace: namespace,
                ..LoadOptions::default()
            };
            let inv = inventory(&load_paths(&paths, &options)?);
            match serde_json::to_string_pretty(&inv) {
                Ok(json) => println!("{json}"),
                Err(e) => {
                    eprintln!("error: cannot encode the inventory: {e}");
                    return Ok(ExitCode::from(2));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Drift {
            defaults,
            base,
            overlay,
            secret_key,
            format,
        } => {
            let defaults_text = read(&defaults)?;
            let base_text = read(&base)?;
            let overlay_texts: Vec<(String, String)> = overlay
                .iter()
                .map(|p| read(p).map(|t| (t, p.display().to_string())))
                .collect::<Result<_, _>>()?;
            let defaults_name = defaults.display().to_string();
            let base_name = base.display().to_string();
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
            Ok(emit(&report, format, Report::to_drift_text))
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
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(InputError::EXIT_CODE as u8)
        }
    }
}
