//! Shared logic of the example services.
