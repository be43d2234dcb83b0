//! The Axum example service. `axum-service --help`.
fn main() -> std::process::ExitCode {
    ate_examples::cli::main("axum-service", ate_examples::axum_app::run)
}
