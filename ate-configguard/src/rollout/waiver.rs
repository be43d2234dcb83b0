//! Waivers: `--allow CODE[=WORKLOAD]` and the `ate.dev/rollout-allow`
//! annotation set a rule aside for one workload or all, and every finding
//! they set aside stays in the report.

use super::units::Unit;
use crate::error::InputError;
use crate::model::{Code, Finding, Severity, WorkloadId};

/// The annotation that waives rules for the workload it is on.
pub(super) const ALLOW_ANNOTATION: &str = "ate.dev/rollout-allow";

/// One waiver given on the command line (or in [`RolloutOptions::allow`](super::RolloutOptions::allow)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    /// The rule it waives.
    pub code: Code,
    /// The workload: `NAME`, `NAMESPACE/NAME` or `KIND/NAMESPACE/NAME`;
    /// `None` waives the rule for every workload.
    pub workload: Option<String>,
}

/// A rule code of the rollout gate, or unusable input naming `what`.
fn rollout_code(code: &str, what: &str) -> Result<Code, InputError> {
    Code::ROLLOUT
        .into_iter()
        .find(|c| c.as_str() == code.trim())
        .ok_or_else(|| InputError::Invalid {
            at: what.to_owned(),
            message: format!(
                "{code:?} is not a rollout rule code (one of {})",
                Code::ROLLOUT.map(Code::as_str).join(", ")
            ),
        })
}

impl Waiver {
    /// Reads `CODE` or `CODE=WORKLOAD`.
    ///
    /// ```
    /// use ate_configguard::rollout::Waiver;
    ///
    /// let w = Waiver::parse("prestop=prod/web")?;
    /// assert_eq!(w.code, "prestop");
    /// assert_eq!(w.workload.as_deref(), Some("prod/web"));
    /// assert!(Waiver::parse("no-such-rule").is_err());
    /// # Ok::<(), ate_configguard::InputError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`InputError::Invalid`] for a code that is not a rollout rule's, or
    /// an empty workload.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let (code, workload) = match text.split_once('=') {
            Some((c, w)) => (c, Some(w)),
            None => (text, None),
        };
        let what = format!("--allow {text}");
        if workload.is_some_and(|w| w.is_empty() || w.split('/').count() > 3) {
            return Err(InputError::Invalid {
                at: what,
                message: "the workload is NAME, NAMESPACE/NAME or KIND/NAMESPACE/NAME".into(),
            });
        }
        Ok(Self {
            code: rollout_code(code, &what)?,
            workload: workload.map(str::to_owned),
        })
    }

    /// Whether it names `id` (or every workload).
    fn covers(&self, id: &WorkloadId) -> bool {
        let Some(w) = &self.workload else { return true };
        let parts: Vec<&str> = w.split('/').collect();
        match parts.as_slice() {
            [name] => *name == id.name,
            [ns, name] => *ns == id.namespace && *name == id.name,
            [kind, ns, name] => *kind == id.kind && *ns == id.namespace && *name == id.name,
            _ => false,
        }
    }

    fn spelled(&self) -> String {
        match &self.workload {
            Some(w) => format!("{}={w}", self.code),
            None => self.code.to_string(),
        }
    }
}

/// The codes `unit`'s annotation waives.
pub(super) fn annotated(unit: &Unit<'_>) -> Result<Vec<Code>, InputError> {
    let Some(value) = unit.annotation(ALLOW_ANNOTATION) else {
        return Ok(Vec::new());
    };
    let what = format!("{} annotation {ALLOW_ANNOTATION}", unit.id);
    value
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .map(|c| rollout_code(c, &what))
        .collect()
}

/// Splits `findings` into the kept and the waived (each waived one says
/// by what), and adds a `waiver-unused` warning for each waiver that set
/// nothing aside. `annotations` holds each workload's annotated codes.
pub(super) fn apply(
    findings: Vec<Finding>,
    waivers: &[Waiver],
    annotations: &[(WorkloadId, Vec<Code>)],
) -> (Vec<Finding>, Vec<Finding>) {
    let mut used_cli = vec![false; waivers.len()];
    let mut used_annotation: Vec<Vec<bool>> = annotations
        .iter()
        .map(|(_, c)| vec![false; c.len()])
        .collect();
    let (mut kept, mut waived) = (Vec::new(), Vec::new());
    for mut f in findings {
        let Some(id) = f.workload.clone() else {
            kept.push(f);
            continue;
        };
        if let Some(i) = waivers
            .iter()
            .position(|w| w.code == f.code && w.covers(&id))
        {
            used_cli[i] = true;
            f.message = format!("{} (waived by --allow {})", f.message, waivers[i].spelled());
            waived.push(f);
            continue;
        }
        let by_annotation = annotations.iter().enumerate().find_map(|(i, (w, codes))| {
            (*w == id).then(|| codes.iter().position(|c| *c == f.code).map(|j| (i, j)))?
        });
        if let Some((i, j)) = by_annotation {
            used_annotation[i][j] = true;
            f.message = format!("{} (waived by annotation {ALLOW_ANNOTATION})", f.message);
            waived.push(f);
            continue;
        }
        kept.push(f);
    }
    let unused = |workload: Option<WorkloadId>, message: String| Finding {
        severity: Severity::Warning,
        code: Code::WaiverUnused,
        workload,
        side: None,
        container: None,
        site: None,
        object: None,
        key: None,
        message,
        source: None,
    };
    for (w, used) in waivers.iter().zip(used_cli) {
        if !used {
            kept.push(unused(
                None,
                format!("--allow {} waived nothing; drop it", w.spelled()),
            ));
        }
    }
    for ((id, codes), used) in annotations.iter().zip(used_annotation) {
        for (code, used) in codes.iter().zip(used) {
            if !used {
                kept.push(unused(
                    Some(id.clone()),
                    format!(
                        "annotation {ALLOW_ANNOTATION} waives {code}, which found nothing; drop it"
                    ),
                ));
            }
        }
    }
    (kept, waived)
}
