//! The command line both binaries share: `--listen`, `--data-dir`, and the
//! `drain` subcommand used as the Kubernetes `exec` preStop hook.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::config::Config;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(version, about = "An example service wired with every ate primitive")]
pub struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Directory for the durable ledger and the rate-limit audit trail
    /// (default: a directory under the system temp dir, printed at start).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// A subcommand instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// preStop hook: POST the loopback drain endpoint, then sleep while the
    /// load balancer notices /ready failing.
    Drain {
        /// The service's port on loopback.
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Seconds to sleep after the drain (load-balancer convergence).
        #[arg(long, default_value_t = 15)]
        sleep: u64,
    },
    /// Print the settings' compiled-in defaults as JSON (variable to value),
    /// for `ate-configguard drift --defaults` against the ConfigMap.
    Defaults,
}

/// Parses the arguments and either runs `drain` or builds the config and
/// hands it to `serve`. Configuration errors exit 2 with a message naming
/// the variable and the value.
pub fn main(
    service: &'static str,
    serve: impl FnOnce(SocketAddr, Config) -> std::io::Result<()>,
) -> ExitCode {
    // Named after the binary (not the package) in --help and --version.
    let matches = Args::command().name(service).get_matches();
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(Command::Drain { port, sleep }) = args.command {
        // The preStop hook: POST the loopback drain endpoint with the
        // secret the service wrote at start (ATE_DRAIN_TOKEN_FILE, else the
        // default path for the port), print its answer, sleep while the
        // load balancer converges (exit 1 if the POST failed, after
        // sleeping anyway).
        let configured = match crate::config::drain_token_file() {
            Ok(path) => path,
            Err(e) => {
                eprintln!("error: {e}");
                std::thread::sleep(Duration::from_secs(sleep));
                return ExitCode::from(1);
            }
        };
        return ate_readiness::prestop::DrainRequest::new(port)
            .token_file(crate::service::drain_token_path(configured, port))
            .run_hook(Duration::from_secs(sleep));
    }
    if let Some(Command::Defaults) = args.command {
        return match serde_json::to_string_pretty(&crate::config::defaults()) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        };
    }
    init_tracing();
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("ate-examples-{service}")));
    let config = match Config::from_env(data_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match serve(args.listen, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Logs go to stderr: stdout's first line is the listening address.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Prints `listening on http://ADDR` as the first stdout line (flushed),
/// then things to try.
pub fn banner(addr: SocketAddr, config: &Config) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on http://{addr}");
    if config.ledger_postgres_url.is_some() {
        let _ = writeln!(
            out,
            "data dir (rate-limit audit trail): {}; ledger: PostgreSQL (ATE_LEDGER_POSTGRES_URL)",
            config.data_dir.display()
        );
    } else {
        let _ = writeln!(
            out,
            "data dir (ledger, rate-limit audit trail): {}",
            config.data_dir.display()
        );
    }
    let _ = writeln!(out, "try:");
    for line in [
        format!("  curl -i http://{addr}/ready"),
        format!("  curl -i -X POST -H 'X-Caller: alice' http://{addr}/notify"),
        format!("  curl -i -X PUT -d '{{\"replicas\":2}}' http://{addr}/objects/web"),
        format!(
            "  curl -i -X POST -H 'Idempotency-Key: k1' -d '{{\"amount\":5}}' http://{addr}/invoke"
        ),
        format!("  curl -s http://{addr}/metrics"),
        format!(
            "  curl -i -X POST -H \"Authorization: Bearer $(cat {})\" http://{addr}/__internal/drain",
            crate::service::drain_token_path(config.drain_token_file.clone(), addr.port())
                .display()
        ),
    ] {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// A bind failure that names the address (the OS error alone does not),
/// and for a port in use, how to pick another.
pub fn listen_error(listen: std::net::SocketAddr, e: std::io::Error) -> std::io::Error {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            " (another process has port {}: pass --listen {}:PORT for another, or port 0 for any free one)",
            listen.port(),
            listen.ip()
        )
    } else {
        String::new()
    };
    std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_hook_defaults_to_the_services_own_port_and_a_15_second_sleep() {
        let serve = Args::try_parse_from(["axum-service"]).unwrap();
        let drain = Args::try_parse_from(["axum-service", "drain"]).unwrap();
        match drain.command {
            Some(Command::Drain { port, sleep }) => {
                assert_eq!(port, serve.listen.port());
                assert_eq!(sleep, 15);
            }
            other => panic!("{other:?}"),
        }
    }
}
