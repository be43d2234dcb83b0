//! What a check answers: the verdict and the report, as text for people.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::sites::OPTIONAL_NOTE;
use crate::model::{Finding, Severity};

/// Whether a transition is safe: serialized as `"safe"` / `"unsafe"` (the
/// report's `result`), the same as [`Report::is_safe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Verdict {
    /// No failure.
    Safe,
    /// At least one failure.
    Unsafe,
}

impl Verdict {
    /// Safe iff `failures` is empty.
    pub(crate) fn of(failures: &[Finding]) -> Self {
        if failures.is_empty() {
            Self::Safe
        } else {
            Self::Unsafe
        }
    }

    /// `"safe"` or `"unsafe"`, as in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Safe => "safe",
            Self::Unsafe => "unsafe",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A verdict compares equal to its JSON spelling.
impl PartialEq<&str> for Verdict {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// `safe` or `unsafe`.
    pub result: Verdict,
    /// Workloads checked (current + proposed; 0 for a drift check).
    pub workloads_checked: usize,
    /// Of them, those of the current state.
    #[serde(default)]
    pub workloads_current: usize,
    /// Of them, those of the proposed state.
    #[serde(default)]
    pub workloads_proposed: usize,
    /// References checked (for a drift check: keys compared).
    pub references_checked: usize,
    /// Failures (any makes the transition unsafe).
    pub failures: Vec<Finding>,
    /// Warnings (optional references that would not resolve, references
    /// outside pod specs).
    pub warnings: Vec<Finding>,
    /// Findings a waiver set aside (the rollout gate's `--allow` and
    /// `ate.dev/rollout-allow`): listed, never silent, never failing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waived: Vec<Finding>,
}

impl Report {
    /// Whether no failure was found.
    pub fn is_safe(&self) -> bool {
        self.failures.is_empty()
    }

    /// The CLI exit code: 0 safe, 1 unsafe.
    pub fn exit_code(&self) -> i32 {
        if self.is_safe() { 0 } else { 1 }
    }

    /// Human-readable text of a transition check: one finding per line,
    /// then a summary. Warnings about optional references that resolve in
    /// neither state (a clean install checked against itself can have
    /// hundreds) are counted on one line, by code; [`to_text_all`](Self::to_text_all)
    /// lists them.
    pub fn to_text(&self) -> String {
        self.text_with(&self.checked(), false)
    }

    /// [`to_text`](Self::to_text) with every warning on a line of its own
    /// (the CLI's `--list-warnings`).
    pub fn to_text_all(&self) -> String {
        self.text_with(&self.checked(), true)
    }

    fn checked(&self) -> String {
        // Per state: one workload in both is two checks, not two
        // workloads.
        format!(
            "{} workload(s) current and {} proposed, {} reference(s) checked",
            self.workloads_current, self.workloads_proposed, self.references_checked
        )
    }

    /// Human-readable text of a drift check, whose `references_checked`
    /// counts the keys compared.
    pub fn to_drift_text(&self) -> String {
        self.text_with(
            &format!("{} key(s) compared", self.references_checked),
            true,
        )
    }

    fn text_with(&self, checked: &str, every_warning: bool) -> String {
        let mut out = String::new();
        let mut optional: BTreeMap<&str, usize> = BTreeMap::new();
        for f in self.failures.iter().chain(&self.warnings) {
            if !every_warning
                && f.severity == Severity::Warning
                && f.message.ends_with(OPTIONAL_NOTE)
            {
                *optional.entry(f.code.as_str()).or_default() += 1;
                continue;
            }
            out.push_str(&f.to_string());
            out.push('\n');
        }
        if !optional.is_empty() {
            let total: usize = optional.values().sum();
            let by_code: Vec<String> = optional.iter().map(|(c, n)| format!("{c}: {n}")).collect();
            out.push_str(&format!(
                "WARN {total} optional reference(s) would not resolve ({}); not failures \
                 (--list-warnings lists them)\n",
                by_code.join(", ")
            ));
        }
        out.push_str(&format!(
            "{}: {} failure(s), {} warning(s); {checked}\n",
            self.result.as_str().to_uppercase(),
            self.failures.len(),
            self.warnings.len(),
        ));
        out
    }
}
