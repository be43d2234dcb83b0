//! Findings: what the check reports, each naming the workload, the
//! reference and the object, never a value.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ObjectId, Place, WorkloadId};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fails the check (exit 1).
    Failure,
    /// Reported, does not fail (optional references, references outside
    /// pod specs).
    Warning,
}

/// Which state a workload was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Serving now; its pods keep running during the rollout.
    Current,
    /// About to be applied.
    Proposed,
    /// Both: the workload is in both states and the finding is the same
    /// for each (reported once).
    Both,
}

/// What a finding is about: a stable code, serialized as its kebab-case
/// name (`missing-object`), as in every report so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Code {
    /// The object a reference names is missing (deleted, or in neither state).
    MissingObject,
    /// The key a reference names is missing from its object.
    MissingKey,
    /// The object changed kind (a ConfigMap became a Secret, or back).
    Reclassified,
    /// A key of an object a workload loads whole (`envFrom`, a volume without `items`) goes.
    BulkKeyRemoved,
    /// An immutable object's keys, or a Secret's type, change: the API server refuses it.
    ImmutableChanged,
    /// A reference outside any pod spec: reported, not checked.
    OutsidePodSpec,
    /// A hook runs before the config object it reads is applied.
    AppliedAfterHook,
    /// A workload's new pods start before a later Argo CD wave applies what they read.
    LaterSyncWave,
    /// What a workload reads is created only by a post-change hook.
    CreatedByPostHook,
    /// A `--retire-key` that waived nothing.
    RetiredKeyUnused,
    /// Drift: an overlay deletes the object the defaults describe.
    ObjectDeleted,
    /// Drift: a key of the defaults is missing from the object.
    MissingDefault,
    /// Drift: a value differs from the compiled-in default.
    ValueDiffers,
    /// Drift: the object holds a key the defaults do not know.
    UnknownKey,
    /// A state that holds CustomResourceDefinitions and no workload where
    /// the other holds workloads: it may be truncated.
    MaybeTruncated,
    /// Rollout: a serving container without a readiness probe, or whose
    /// readiness and liveness probes ask the same endpoint.
    ProbeSplit,
    /// Rollout: liveness would restart a pod before readiness takes it
    /// out of the load balancer.
    LivenessFirst,
    /// Rollout: a serving container without a preStop hook that works.
    Prestop,
    /// Rollout: the grace period does not cover preStop, drain and margin.
    GraceBudget,
    /// Rollout: a load balancer drains longer than pods live, or
    /// health-checks another path than readiness.
    LbDrain,
    /// Rollout: an image reference that is malformed, ambiguous or mutable.
    ImageIdentity,
    /// Rollout: a rollout that takes every serving pod out, or a
    /// disruption budget at odds with it.
    Headroom,
    /// Rollout: a single-writer workload that can run two pods at once.
    SingleWriter,
    /// Rollout: a waiver (`--allow`, `ate.dev/rollout-allow`) that waived
    /// nothing.
    WaiverUnused,
}

impl Code {
    /// The code as reports spell it (`missing-object`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingObject => "missing-object",
            Self::MissingKey => "missing-key",
            Self::Reclassified => "reclassified",
            Self::BulkKeyRemoved => "bulk-key-removed",
            Self::ImmutableChanged => "immutable-changed",
            Self::OutsidePodSpec => "outside-pod-spec",
            Self::AppliedAfterHook => "applied-after-hook",
            Self::LaterSyncWave => "later-sync-wave",
            Self::CreatedByPostHook => "created-by-post-hook",
            Self::RetiredKeyUnused => "retired-key-unused",
            Self::ObjectDeleted => "object-deleted",
            Self::MissingDefault => "missing-default",
            Self::ValueDiffers => "value-differs",
            Self::UnknownKey => "unknown-key",
            Self::MaybeTruncated => "maybe-truncated",
            Self::ProbeSplit => "probe-split",
            Self::LivenessFirst => "liveness-first",
            Self::Prestop => "prestop",
            Self::GraceBudget => "grace-budget",
            Self::LbDrain => "lb-drain",
            Self::ImageIdentity => "image-identity",
            Self::Headroom => "headroom",
            Self::SingleWriter => "single-writer",
            Self::WaiverUnused => "waiver-unused",
        }
    }

    /// The rollout gate's rule codes, each a code a waiver may name.
    pub const ROLLOUT: [Code; 8] = [
        Code::ProbeSplit,
        Code::LivenessFirst,
        Code::Prestop,
        Code::GraceBudget,
        Code::LbDrain,
        Code::ImageIdentity,
        Code::Headroom,
        Code::SingleWriter,
    ];
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A code compares equal to its spelling in reports.
impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One finding. Names only: never a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Finding {
    /// Failure or warning.
    pub severity: Severity,
    /// A stable code: `missing-object`, `missing-key`, `reclassified`,
    /// `bulk-key-removed`, `immutable-changed` (the keys of an immutable
    /// object, or a Secret's type), `outside-pod-spec`,
    /// `applied-after-hook`, `later-sync-wave`, `created-by-post-hook`,
    /// `retired-key-unused` (a [`RetiredKey`](super::RetiredKey) that waived nothing).
    pub code: Code,
    /// The workload, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadId>,
    /// Which state the workload came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side: Option<Side>,
    /// The container, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The reference site.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectId>,
    /// The key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What the proposed state does, in words.
    pub message: String,
    /// Where the workload was read, for CI annotations (file, document,
    /// line); `None` when it was built in code or no workload is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Place>,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.severity {
            Severity::Failure => "FAIL",
            Severity::Warning => "WARN",
        };
        write!(f, "{label} [{}]", self.code)?;
        if let Some(w) = &self.workload {
            write!(f, " {w}")?;
        }
        if let Some(s) = self.side {
            let side = match s {
                Side::Current => "current",
                Side::Proposed => "proposed",
                Side::Both => "current and proposed",
            };
            write!(f, " ({side})")?;
        }
        if let Some(c) = &self.container {
            write!(f, " container {c}")?;
        }
        if let Some(s) = &self.site {
            write!(f, " {s}")?;
        }
        if let Some(o) = &self.object {
            write!(f, " -> {o}")?;
        }
        if let Some(k) = &self.key {
            write!(f, " key {k}")?;
        }
        write!(f, ": {}", self.message)
    }
}
