//! The Actix example service (same API as `axum-service`). `actix-service --help`.
fn main() -> std::process::ExitCode {
    ate_examples::cli::main("actix-service", ate_examples::actix_app::run)
}
