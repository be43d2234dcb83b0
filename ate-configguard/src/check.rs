//! The rule: every workload serving during or after the transition must
//! have each non-optional reference resolve in the PROPOSED config state.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::InputError;
use crate::model::{
    Code, ConfigKind, ConfigObject, Finding, Hook, HookPhase, Inventory, Manifests, ObjectId,
    PULL_SECRET_KEYS, PULL_SECRET_TYPES, Reference, RetiredKey, ServiceAccount, Severity, Side,
    Workload, WorkloadId,
};

/// Which current objects the proposed state deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Deletion {
    /// Only the objects listed (possibly none). The default: an object
    /// absent from the proposed input is left as it is.
    #[default]
    Listed,
    /// Every current object absent from the proposed input is deleted (as
    /// `helm upgrade` or `kubectl apply --prune` would) in the namespaces
    /// the proposed input touches (as `kubectl apply --prune` does: it
    /// prunes only the namespaces of what it applied; an empty proposed
    /// input touches none, and then every namespace is pruned, the reading
    /// that can only fail more), except the ones the
    /// control plane keeps in every namespace whatever is applied
    /// ([`CONTROL_PLANE_OBJECTS`]): live state lists them and every pod
    /// mounts one, but no deploy removes them, the ones annotated to be
    /// left alone by Helm or Argo CD ([`ConfigObject::kept_on_prune`]), and
    /// hooks (made by a hook annotation: neither tool counts a hook as a
    /// resource of the release or application, so neither prunes one; it
    /// goes only by its delete policy).
    Prune,
}

/// ConfigMaps that the platform itself keeps in every namespace (re-created
/// at once if deleted), with the one key each holds: `--prune` never
/// counts them as deleted, and a reference to that key resolves even when
/// the input lists no ConfigMaps (`kubectl get pods -o yaml`).
/// `kube-root-ca.crt` (`ca.crt`) is mounted by every pod's service-account
/// token volume (`kube-api-access-*`); OpenShift adds
/// `openshift-service-ca.crt` (`service-ca.crt`) to that projection in
/// every namespace.
pub const CONTROL_PLANE_OBJECTS: [(ConfigKind, &str, &str); 2] = [
    (ConfigKind::ConfigMap, "kube-root-ca.crt", "ca.crt"),
    (
        ConfigKind::ConfigMap,
        "openshift-service-ca.crt",
        "service-ca.crt",
    ),
];

/// Whether `id` is one of the [`CONTROL_PLANE_OBJECTS`].
fn is_control_plane_object(id: &ObjectId) -> bool {
    CONTROL_PLANE_OBJECTS
        .iter()
        .any(|(kind, name, _)| id.kind == *kind && id.name == *name)
}

/// Whether the platform itself keeps `target` (and `key` in it) in every
/// namespace ([`CONTROL_PLANE_OBJECTS`]); another key of it does not
/// resolve.
fn kept_by_control_plane(target: &ObjectId, key: Option<&str>) -> bool {
    CONTROL_PLANE_OBJECTS.iter().any(|(kind, name, held)| {
        target.kind == *kind && target.name == *name && key.is_none_or(|k| k == *held)
    })
}

/// One finding per reference: where the current and the proposed
/// workload break the same way (the same reference, object, key and
/// words), one finding says so for both (`Side::Both`), placed where the
/// proposed one was read. Order is kept otherwise.
fn once_per_reference(findings: impl IntoIterator<Item = Finding>) -> Vec<Finding> {
    let findings: Vec<Finding> = findings.into_iter().collect();
    // What must agree: everything but the side and the place.
    let key = |f: &Finding| {
        let mut k = f.clone();
        k.side = None;
        k.source = None;
        k
    };
    let mut proposed: HashMap<Finding, Vec<usize>> = HashMap::new();
    for (i, f) in findings.iter().enumerate() {
        if f.side == Some(Side::Proposed) {
            proposed.entry(key(f)).or_default().push(i);
        }
    }
    let mut merged = vec![false; findings.len()];
    let mut both_at: HashMap<usize, usize> = HashMap::new();
    for (i, f) in findings.iter().enumerate() {
        if f.side != Some(Side::Current) {
            continue;
        }
        if let Some(j) = proposed.get_mut(&key(f)).and_then(Vec::pop) {
            merged[i] = true;
            both_at.insert(j, i);
        }
    }
    let mut out = Vec::with_capacity(findings.len());
    for (i, f) in findings.into_iter().enumerate() {
        if merged[i] {
            continue;
        }
        let mut f = f;
        if both_at.contains_key(&i) {
            f.side = Some(Side::Both);
        }
        out.push(f);
    }
    out
}

/// How a warning about an optional reference ends.
const OPTIONAL_NOTE: &str = " (optional reference: not a failure)";

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct CheckInput {
    /// The serving state: workloads and config objects.
    pub current: Manifests,
    /// The manifests about to be applied.
    pub proposed: Manifests,
    /// A previous names-only inventory (for envFrom key removal).
    pub inventory: Option<Inventory>,
    /// How deletions are decided.
    pub deletion: Deletion,
    /// Objects the proposed state deletes explicitly.
    pub delete: Vec<ObjectId>,
    /// Keys the proposed state removes on purpose: a bulk load that loses
    /// one is a warning, not a failure ([`RetiredKey`]). One that waives
    /// nothing is a warning of its own, `retired-key-unused`.
    pub retired: Vec<RetiredKey>,
}

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
    /// References checked (for a drift check: keys compared).
    pub references_checked: usize,
    /// Failures (any makes the transition unsafe).
    pub failures: Vec<Finding>,
    /// Warnings (optional references that would not resolve, references
    /// outside pod specs).
    pub warnings: Vec<Finding>,
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
        format!(
            "{} workload(s), {} reference(s) checked",
            self.workloads_checked, self.references_checked
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

/// Parses `KIND/NAMESPACE/NAME` for a deletion.
///
/// # Errors
///
/// [`InputError::Invalid`] naming `s`, if it is not three non-empty parts
/// or the kind is not a ConfigMap or Secret.
pub fn parse_object_id(s: &str) -> Result<ObjectId, InputError> {
    let parts: Vec<&str> = s.split('/').collect();
    let shape = "ConfigMap/NAMESPACE/NAME or Secret/NAMESPACE/NAME";
    let [kind, namespace, name] = parts.as_slice() else {
        return Err(not_shaped(s, "--delete", shape));
    };
    object_id(s, [kind, namespace, name], "--delete", shape)
}

/// Parses `KIND/NAMESPACE/NAME/KEY` for a key retired on purpose
/// (`--retire-key`), held to the rules of [`parse_object_id`] and of the
/// keys the API server takes.
///
/// ```
/// let r = ate_configguard::manifest::parse_retired_key("cm/shop/api-config/db_password").unwrap();
/// assert_eq!(r.to_string(), "ConfigMap/shop/api-config/db_password");
/// assert!(ate_configguard::manifest::parse_retired_key("cm/shop/api-config").is_err());
/// ```
///
/// # Errors
///
/// [`InputError::Invalid`] naming `s`, if it is not four non-empty parts,
/// the kind is not a ConfigMap or Secret, the namespace or name is none
/// the API server takes, or the key is none a ConfigMap or Secret can
/// hold.
pub fn parse_retired_key(s: &str) -> Result<RetiredKey, InputError> {
    let at = "--retire-key";
    let shape = "ConfigMap/NAMESPACE/NAME/KEY or Secret/NAMESPACE/NAME/KEY";
    let parts: Vec<&str> = s.split('/').collect();
    let [kind, namespace, name, key] = parts.as_slice() else {
        return Err(not_shaped(s, at, shape));
    };
    let object = object_id(s, [kind, namespace, name], at, shape)?;
    if key.is_empty() {
        return Err(not_shaped(s, at, shape));
    }
    if !crate::load::is_key(key) {
        return Err(InputError::Invalid {
            at: at.into(),
            message: format!(
                "{s:?}: {key:?} is no key a ConfigMap or Secret can hold (at most 253 \
                 characters of a-z, A-Z, 0-9, '-', '_' and '.', not '.' nor starting with '..')"
            ),
        });
    }
    Ok(RetiredKey {
        object,
        key: (*key).to_owned(),
    })
}

fn not_shaped(s: &str, at: &str, shape: &str) -> InputError {
    InputError::Invalid {
        at: at.into(),
        message: format!("{s:?} is not {shape}"),
    }
}

/// The object named by `s`'s parts `[kind, namespace, name]`, for the
/// option `at`.
fn object_id(
    s: &str,
    [kind, namespace, name]: [&str; 3],
    at: &str,
    shape: &str,
) -> Result<ObjectId, InputError> {
    if namespace.is_empty() || name.is_empty() {
        return Err(not_shaped(s, at, shape));
    }
    let kind = ConfigKind::parse(kind).ok_or_else(|| not_shaped(s, at, shape))?;
    // A mistyped namespace (`Prod`) names nothing the current state holds,
    // so the deletion would pass unchecked.
    if !crate::load::is_namespace_name(namespace) {
        return Err(InputError::Invalid {
            at: at.into(),
            message: format!(
                "{s:?}: namespace {namespace:?} {}",
                crate::load::NOT_A_NAMESPACE
            ),
        });
    }
    crate::load::object_name_ok(kind, name, at)?;
    Ok(ObjectId {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

type Index<'a> = HashMap<&'a ObjectId, &'a ConfigObject>;

type Accounts<'a> = HashMap<(&'a str, &'a str), &'a ServiceAccount>;

/// `items` by `key`, borrowed; two items with one key in one state are an
/// input error naming it (`name`).
fn unique<'a, T, K: Eq + std::hash::Hash>(
    items: &'a [T],
    key: impl Fn(&'a T) -> K,
    name: impl Fn(&T, &T) -> String,
    at: &str,
) -> Result<HashMap<K, &'a T>, InputError> {
    let mut map = HashMap::with_capacity(items.len());
    for item in items {
        if let Some(first) = map.insert(key(item), item) {
            return Err(InputError::Invalid {
                at: at.into(),
                message: format!("{} appears twice", name(first, item)),
            });
        }
    }
    Ok(map)
}

/// Objects by identity, borrowed (no copies of key sets).
fn index<'a>(objects: &'a [ConfigObject], at: &str) -> Result<Index<'a>, InputError> {
    fn made(o: &ConfigObject) -> &str {
        o.made_by.as_deref().unwrap_or("the input itself")
    }
    unique(
        objects,
        |o| &o.id,
        |first, second| match (&first.made_by, &second.made_by) {
            (None, None) => first.id.to_string(),
            // Two controllers would write it: which keys it ends with is
            // not known.
            _ => format!(
                "{} (made by {} and by {})",
                first.id,
                made(first),
                made(second)
            ),
        },
        at,
    )
}

/// The workloads of a state, each one that runs another's pod template
/// ([`Workload::template_from`]) given that template's references and
/// ServiceAccount: the template's workload in `workloads`, else in
/// `fallback` (the current state, for a proposed input that leaves it as it
/// is). Borrowed as they are when none runs another's template.
fn run_templates<'a>(
    workloads: &'a [Workload],
    fallback: &[Workload],
    at: &str,
) -> Result<Cow<'a, [Workload]>, InputError> {
    if workloads.iter().all(|w| w.template_from.is_none()) {
        return Ok(Cow::Borrowed(workloads));
    }
    let resolve = |w: &Workload| {
        let Some(from) = &w.template_from else {
            return Ok(w.clone());
        };
        let where_ = if fallback.is_empty() {
            "the current input does not hold it"
        } else {
            "neither the proposed nor the current input holds it"
        };
        let template = workloads
            .iter()
            .chain(fallback)
            .find(|t| t.id == *from && t.template_from.is_none())
            .ok_or_else(|| InputError::Invalid {
                at: at.to_owned(),
                message: format!(
                    "{} runs the pod template of {from}, and {where_}: without it, what \
                     its pods read is not known; give {from} too",
                    w.id
                ),
            })?;
        Ok(Workload {
            references: template.references.clone(),
            service_account: template.service_account.clone(),
            ..w.clone()
        })
    };
    workloads
        .iter()
        .map(resolve)
        .collect::<Result<Vec<_>, _>>()
        .map(Cow::Owned)
}

/// Whether the change applies the proposed account `a` before it creates
/// the pods of the proposed workload `w`: in an earlier phase (before the
/// change, with it, after it, never: a hook of a phase the change never
/// runs is never applied), or in the same one, in an Argo CD sync wave no
/// later than `w`'s (a wave's ServiceAccounts come before its workloads),
/// or as a hook of `w`'s phase created before it.
fn applied_first(a: &ServiceAccount, w: &Workload) -> bool {
    let phase = |h: &Option<Hook>| h.as_ref().map_or(HookPhase::WithChange, |h| h.phase);
    let (mine, its) = (phase(&w.hook), phase(&a.hook));
    if its != mine {
        return its < mine;
    }
    match (&w.hook, &a.hook) {
        (Some(h), Some(ah)) if mine != HookPhase::WithChange => {
            h.runs_after(&w.id.name, ah, &a.name)
        }
        _ => a.sync_wave.unwrap_or(0) <= w.sync_wave.unwrap_or(0),
    }
}

/// ServiceAccounts by namespace and name.
fn accounts<'a>(list: &'a [ServiceAccount], at: &str) -> Result<Accounts<'a>, InputError> {
    unique(
        list,
        |a| (a.namespace.as_str(), a.name.as_str()),
        |_, a| format!("ServiceAccount/{}/{}", a.namespace, a.name),
        at,
    )
}

struct Ctx<'a> {
    current: &'a Index<'a>,
    /// The state after the change.
    proposed: &'a Index<'a>,
    /// The objects of the proposed input alone.
    proposed_in: &'a Index<'a>,
    inventory: HashMap<&'a ObjectId, &'a BTreeSet<String>>,
    /// (namespace, key) -> objects holding that key in the proposed state;
    /// built on the first missing key (it only feeds the message).
    holders: OnceCell<HashMap<(&'a str, &'a str), Vec<&'a ObjectId>>>,
    /// Current workloads that `--prune` deletes along with the change.
    pruned: HashSet<&'a WorkloadId>,
    /// Keys the change retires on purpose.
    retired: HashSet<(&'a ObjectId, &'a str)>,
}

impl<'a> Ctx<'a> {
    fn holders(&self, namespace: &str, key: &str) -> Vec<String> {
        let holders = self.holders.get_or_init(|| {
            let mut map: HashMap<(&str, &str), Vec<&ObjectId>> = HashMap::new();
            for (id, o) in self.proposed {
                for k in &o.keys {
                    map.entry((id.namespace.as_str(), k.as_str()))
                        .or_default()
                        .push(id);
                }
            }
            map
        });
        let mut found: Vec<String> = holders
            .get(&(namespace, key))
            .map(|ids| ids.iter().map(|i| i.to_string()).collect())
            .unwrap_or_default();
        found.sort();
        found
    }
}

/// Runs the check.
///
/// An unsafe transition is a [`Report`] whose failures say why, not an
/// error.
///
/// # Errors
///
/// [`InputError::Invalid`] for states it cannot judge: one object or
/// ServiceAccount twice in a state, an object both deleted (`delete`)
/// and in the proposed manifests, or a previous inventory of another
/// format version than [`Inventory::VERSION`] or listing an object twice.
pub fn check(input: &CheckInput) -> Result<Report, InputError> {
    let current = index(&input.current.objects, "current state")?;
    let proposed_in = index(&input.proposed.objects, "proposed state")?;
    let mut proposed = current.clone();
    let mut pruned = HashSet::new();
    if input.deletion == Deletion::Prune {
        let touched: BTreeSet<&str> = input
            .proposed
            .objects
            .iter()
            .map(|o| o.id.namespace.as_str())
            .chain(
                input
                    .proposed
                    .workloads
                    .iter()
                    .map(|w| w.id.namespace.as_str()),
            )
            .chain(
                input
                    .proposed
                    .service_accounts
                    .iter()
                    .map(|a| a.namespace.as_str()),
            )
            .collect();
        // Workloads are pruned too; their pods serve until they are deleted,
        // so their references still count, but the finding says so.
        let kept: HashSet<&WorkloadId> = input.proposed.workloads.iter().map(|w| &w.id).collect();
        pruned = input
            .current
            .workloads
            .iter()
            .filter(|w| w.kept_on_prune.is_none() && w.hook.is_none())
            .map(|w| &w.id)
            .filter(|id| {
                !kept.contains(id)
                    && (touched.is_empty() || touched.contains(id.namespace.as_str()))
            })
            .collect();
        proposed.retain(|id, object| {
            proposed_in.contains_key(*id)
                // Nothing applied gives no scope: then everything goes.
                || !(touched.is_empty() || touched.contains(id.namespace.as_str()))
                || is_control_plane_object(id)
                // An annotation tells Helm or Argo CD to leave it, or it
                // was made as a hook, which neither prunes.
                || object.kept_on_prune.is_some()
                || object.hook.is_some()
        });
    }
    for id in &input.delete {
        if proposed_in.contains_key(id) {
            return Err(InputError::Invalid {
                at: "--delete".into(),
                message: format!("{id} is both deleted and in the proposed manifests"),
            });
        }
        proposed.remove(id);
    }
    proposed.extend(&proposed_in);
    // A hook of the change that it does not create, or deletes again once
    // its hooks succeed, is not there after the change (whatever was there
    // before: an object that becomes such a hook is no longer one the
    // release or the application applies). A live one the change does not
    // name stays as it is.
    proposed.retain(|id, _| {
        proposed_in
            .get(id)
            .and_then(|o| o.hook.as_ref())
            .is_none_or(Hook::kept_after)
    });
    let ctx = Ctx {
        current: &current,
        proposed: &proposed,
        proposed_in: &proposed_in,
        inventory: match &input.inventory {
            None => HashMap::new(),
            Some(inv) => inventory_index(inv)?,
        },
        holders: OnceCell::new(),
        pruned,
        retired: input
            .retired
            .iter()
            .map(|r| (&r.object, r.key.as_str()))
            .collect(),
    };

    let current_accounts = accounts(&input.current.service_accounts, "current state")?;
    let proposed_accounts = accounts(&input.proposed.service_accounts, "proposed state")?;
    // One workload twice in one state (two files that define it): which
    // one is applied, or which a Rollout runs, depends on their order.
    for (workloads, at) in [
        (&input.current.workloads, "current state"),
        (&input.proposed.workloads, "proposed state"),
    ] {
        unique(workloads, |w| &w.id, |_, w| w.id.to_string(), at)?;
    }
    let mut findings: BTreeSet<Finding> = BTreeSet::new();
    let mut references = 0;
    let current_workloads = run_templates(&input.current.workloads, &[], "current state")?;
    let proposed_workloads = run_templates(
        &input.proposed.workloads,
        &input.current.workloads,
        "proposed state",
    )?;
    let sides = [
        (Side::Current, &current_workloads),
        (Side::Proposed, &proposed_workloads),
    ];
    for (side, workloads) in sides {
        for w in workloads.iter() {
            // The pull secrets its ServiceAccount adds to every pod: the
            // account as it is when the pods of that side are admitted (a
            // proposed workload's get the proposed account if the change
            // applies it first, else the account as it is now, if there is
            // one). They are the pod's own then, judged as the ones its
            // spec names.
            let id = (w.id.namespace.as_str(), w.service_account.as_str());
            let account = match side {
                Side::Current | Side::Both => current_accounts.get(&id),
                Side::Proposed => match proposed_accounts.get(&id) {
                    Some(a) if applied_first(a, w) => Some(a),
                    proposed => current_accounts.get(&id).or(proposed),
                },
            };
            let added: Vec<Reference> = (account.iter())
                .flat_map(|a| &a.image_pull_secrets)
                .map(|secret| Reference::account_pull_secret(&w.service_account, secret))
                .collect();
            for r in w.references.iter().chain(&added) {
                references += 1;
                match (side, &w.hook) {
                    // (A dormant one starts no pod: checked as any, warnings.)
                    (Side::Proposed, Some(hook))
                        if w.dormant.is_none() && hook.phase != HookPhase::WithChange =>
                    {
                        check_hook(&ctx, w, hook, r, &mut findings);
                    }
                    (Side::Proposed, _) if w.dormant.is_none() => {
                        check_reference(&ctx, w, side, r, &mut findings);
                        check_arrives_later(&ctx, w, r, &mut findings);
                    }
                    _ => check_reference(&ctx, w, side, r, &mut findings),
                }
            }
        }
    }
    for note in input.current.notes.iter().chain(&input.proposed.notes) {
        if let Some(note) = outside_note(&ctx, note) {
            findings.insert(note);
        }
    }
    // A retirement that waived nothing: kept in a pipeline, it would waive
    // the next, unintended removal of that key.
    let waived: HashSet<(&ObjectId, &str)> = findings
        .iter()
        .filter(|f| f.code == "bulk-key-removed")
        .filter_map(|f| Some((f.object.as_ref()?, f.key.as_deref()?)))
        .collect();
    let mut unused: Vec<Finding> = Vec::new();
    for r in &input.retired {
        if waived.contains(&(&r.object, r.key.as_str())) {
            continue;
        }
        let kept = ctx
            .proposed
            .get(&r.object)
            .is_some_and(|o| o.keys.contains(&r.key));
        unused.push(Finding {
            severity: Severity::Warning,
            code: Code::RetiredKeyUnused,
            workload: None,
            side: None,
            container: None,
            site: None,
            object: Some(r.object.clone()),
            key: Some(r.key.clone()),
            message: if kept {
                "retired, but the proposed state keeps this key: nothing was waived (drop the \
                 retirement, or remove the key)"
            } else {
                "retired, but no bulk load in this change loses this key: nothing was waived \
                 (drop the retirement)"
            }
            .into(),
            source: None,
        });
    }
    findings.extend(unused);
    let (failures, warnings): (Vec<Finding>, Vec<Finding>) = once_per_reference(findings)
        .into_iter()
        .partition(|f| f.severity == Severity::Failure);
    Ok(Report {
        result: Verdict::of(&failures),
        workloads_checked: input.current.workloads.len() + input.proposed.workloads.len(),
        references_checked: references,
        failures,
        warnings,
    })
}

/// A reference of a proposed workload that is a hook (of a phase other
/// than Argo CD's `Sync`): it resolves in the state when its phase runs
/// (before the change: the current one; after it, or not run by it: the
/// state after the change), or in a config object that is a hook of its
/// phase created before it. What only comes later (with the change, or
/// with a hook of its phase created after it) is a failure of its own
/// (`applied-after-hook`); anything else is checked as any proposed
/// reference is.
fn check_hook(
    ctx: &Ctx<'_>,
    w: &Workload,
    hook: &Hook,
    r: &Reference,
    out: &mut BTreeSet<Finding>,
) {
    let target = r.target(&w.id.namespace);
    let brought = ctx.proposed_in.get(&target).copied();
    let earlier = brought.filter(|o| {
        o.hook
            .as_ref()
            .is_some_and(|h| hook.runs_after(&w.id.name, h, &o.id.name))
    });
    let before = hook.phase == HookPhase::BeforeChange;
    // A hook of its phase created after it is still as it is now.
    let later_of_phase = earlier.is_none()
        && brought.is_some_and(|o| o.hook.as_ref().is_some_and(|h| h.phase == hook.phase));
    let base = if before || later_of_phase {
        ctx.current.get(&target).copied()
    } else {
        ctx.proposed.get(&target).copied()
    };
    match earlier.or(base) {
        Some(o) if r.resolves_in(o) => {
            // Read in the state after the change: all of its checks.
            if earlier.is_none() && !before && !later_of_phase {
                check_reference(ctx, w, Side::Proposed, r, out);
            }
            return;
        }
        // A hook object made for it, without what it reads.
        Some(_) if earlier.is_some() => return check_reference(ctx, w, Side::Proposed, r, out),
        _ => {}
    }
    let later_hook = |phase: HookPhase| {
        if before {
            phase != HookPhase::NotRun
        } else {
            phase == hook.phase
        }
    };
    let later = if before {
        ctx.proposed.get(&target).copied()
    } else {
        None
    }
    .or(brought.filter(|o| o.hook.as_ref().is_some_and(|h| later_hook(h.phase))));
    let Some(later) = later.filter(|o| r.resolves_in(o)) else {
        return check_reference(ctx, w, Side::Proposed, r, out);
    };
    let what = match &r.key {
        Some(key) if base.is_some() => format!("key {key}"),
        _ => r.kind.to_string(),
    };
    let message = match (before, &later.hook) {
        (true, _) => format!(
            "runs as a hook before the change is applied ({}), and the {what} comes only with \
             the change: make the {} a hook that is created before it (a lower weight), or run \
             this workload after the change (post-install / post-upgrade, PostSync)",
            hook.annotation, r.kind
        ),
        (false, later) => format!(
            "runs as a hook ({}), and the {what} comes only with a hook of its phase created \
             after it ({}): give the {} a lower weight",
            hook.annotation,
            later.as_ref().map_or("", |h| h.annotation.as_str()),
            r.kind
        ),
    };
    out.insert(too_late(Code::AppliedAfterHook, w, r, target, message));
}

/// A reference of a proposed workload (no hook, or an Argo CD `Sync` one)
/// to a config object that the change brings only after the workload's new
/// pods start, so that they start while it is as it is now:
///
/// - in a later Argo CD sync wave (`later-sync-wave`): Argo CD waits for
///   the pods to be healthy before it syncs the next wave;
/// - with a hook that runs after the change (Helm `post-install` /
///   `post-upgrade`, Argo CD `PostSync`; `created-by-post-hook`): Argo CD
///   (or `helm --wait`) waits for the pods to be ready before it runs any.
///
/// What that object brings and the current one lacks is a failure of its
/// own. (What the state after the change lacks is [`check_reference`]'s to
/// report.)
fn check_arrives_later(ctx: &Ctx<'_>, w: &Workload, r: &Reference, out: &mut BTreeSet<Finding>) {
    let target = r.target(&w.id.namespace);
    let wave = w.sync_wave.unwrap_or(0);
    let Some(later) = ctx.proposed_in.get(&target).copied() else {
        return;
    };
    let post_hook = later
        .hook
        .as_ref()
        .filter(|h| h.phase == HookPhase::AfterChange && h.kept_after());
    let in_later_wave = later
        .hook
        .as_ref()
        .is_none_or(|h| h.phase == HookPhase::WithChange)
        && later.sync_wave.unwrap_or(0) > wave;
    if post_hook.is_none() && !in_later_wave {
        return;
    }
    let now = ctx.current.get(&target);
    if !r.resolves_in(later) || now.is_some_and(|o| r.resolves_in(o)) {
        return;
    }
    let kind = r.kind;
    let (code, message) = match post_hook {
        Some(hook) => {
            let what = match &r.key {
                Some(key) if now.is_some() => format!("key {key}"),
                _ => kind.to_string(),
            };
            let message = format!(
                "the {what} comes only with a hook that runs after the change is applied \
                 ({}): its new pods cannot start until then, and Argo CD (or `helm --wait`) \
                 waits for them first; make the {kind} no hook, or one that runs before the \
                 change (pre-install / pre-upgrade, PreSync)",
                hook.annotation
            );
            (Code::CreatedByPostHook, message)
        }
        None => {
            let later_wave = later.sync_wave.unwrap_or(0);
            let what = match &r.key {
                Some(key) if now.is_some() => format!(
                    "the key {key} comes only with the {kind}'s change in wave {later_wave}"
                ),
                _ => format!("the {kind} is created only in wave {later_wave}"),
            };
            let message = format!(
                "is synced in wave {wave}, and {what}: its new pods cannot start, and Argo CD \
                 waits for them before the next wave; put the {kind} in wave {wave} or earlier"
            );
            (Code::LaterSyncWave, message)
        }
    };
    out.insert(too_late(code, w, r, target, message));
}

/// A proposed workload's reference to what the change brings only after
/// the workload starts: a failure, or a warning for an optional one.
fn too_late(
    code: Code,
    w: &Workload,
    r: &Reference,
    target: ObjectId,
    mut message: String,
) -> Finding {
    if r.optional {
        message.push_str(OPTIONAL_NOTE);
    }
    Finding {
        severity: if r.optional {
            Severity::Warning
        } else {
            Severity::Failure
        },
        code,
        workload: Some(w.id.clone()),
        side: Some(Side::Proposed),
        container: r.container.clone(),
        site: Some(r.site.clone()),
        object: Some(target),
        key: r.key.clone(),
        message,
        source: w.source.clone(),
    }
}

/// A reference that no pod reads (an Ingress's or a Gateway's TLS Secret)
/// is a warning when the proposed state deletes its object, or when the
/// input holds no such object to tell; nothing when it resolves.
fn outside_note(ctx: &Ctx<'_>, note: &Finding) -> Option<Finding> {
    let Some(object) = note.object.as_ref() else {
        return Some(note.clone());
    };
    if ctx.proposed.contains_key(object) {
        return None;
    }
    let mut note = note.clone();
    note.message = if ctx.current.contains_key(object) {
        format!(
            "the proposed state deletes this {}, which is named outside any pod spec: \
             a warning, not a failure (this guard checks what pods read)",
            object.kind
        )
    } else {
        format!(
            "reference outside a pod spec to a {} the input does not hold (one that a \
             controller such as cert-manager writes, say): reported, not checked",
            object.kind
        )
    };
    Some(note)
}

fn check_reference(
    ctx: &Ctx<'_>,
    w: &Workload,
    side: Side,
    r: &Reference,
    out: &mut BTreeSet<Finding>,
) {
    let target = r.target(&w.id.namespace);
    let mut site = Site {
        severity: if r.optional || w.dormant.is_some() {
            Severity::Warning
        } else {
            Severity::Failure
        },
        current: ctx.current.get(&target).copied(),
        target,
        ctx,
        w,
        side,
        r,
        out,
    };
    let Some(object) = ctx.proposed.get(&site.target).copied() else {
        site.absent();
        return;
    };
    site.refused_in_place(object);
    match &r.key {
        Some(key) if !object.keys.contains(key) => site.missing_key(object, key),
        Some(_) => {}
        None if r.is_pull_secret() => site.pull_secret(object),
        None if r.bulk => site.bulk_keys(object),
        None => {}
    }
}

/// One reference of one workload being checked: what each question about
/// it needs, and where its findings go.
struct Site<'c, 'a> {
    ctx: &'c Ctx<'a>,
    w: &'c Workload,
    side: Side,
    r: &'c Reference,
    target: ObjectId,
    /// The object in the current state.
    current: Option<&'a ConfigObject>,
    /// A failure, or a warning for an optional reference or a dormant
    /// workload.
    severity: Severity,
    out: &'c mut BTreeSet<Finding>,
}

impl Site<'_, '_> {
    /// Records a finding about this reference.
    fn report(&mut self, code: Code, key: Option<&str>, mut message: String) {
        let (ctx, w, r, side) = (self.ctx, self.w, self.r, self.side);
        let target = self.target.clone();
        let retired = key.is_some_and(|k| ctx.retired.contains(&(&target, k)));
        // Retiring a key on purpose waives its loss from a bulk load (the
        // pods start without that variable or file), never a reference by
        // name (the pods would not start).
        let waived = retired && code == "bulk-key-removed";
        if retired && code == "missing-key" {
            message.push_str(
                " (it is retired, which waives its loss from bulk loads only: a reference by \
                 name still fails; remove the reference in an earlier step)",
            );
        }
        if r.optional {
            message.push_str(OPTIONAL_NOTE);
        }
        if let Some(why) = &w.dormant {
            message.push_str(&format!(
                " (not serving: {why}; not a failure, but starting it again would fail)"
            ));
        }
        if side == Side::Current && ctx.pruned.contains(&w.id) {
            message.push_str(
                "; the same change prunes this workload, whose pods serve until it is \
                 deleted: delete it in an earlier step of its own",
            );
        }
        self.out.insert(Finding {
            severity: if waived {
                Severity::Warning
            } else {
                self.severity
            },
            code,
            workload: Some(w.id.clone()),
            side: Some(side),
            container: r.container.clone(),
            site: Some(r.site.clone()),
            object: Some(target.clone()),
            key: key.map(str::to_owned),
            message,
            source: w.source.clone(),
        });
    }

    /// The object is not in the proposed state (or only as a hook that is
    /// gone after the change).
    fn absent(&mut self) {
        let (ctx, r, current) = (self.ctx, self.r, self.current);
        let target = self.target.clone();
        if let Some(hook) = ctx
            .proposed_in
            .get(&target)
            .and_then(|o| o.hook.as_ref())
            .filter(|h| !h.kept_after())
        {
            let (why, fix) = match &hook.deleted_after {
                Some(policy) => (
                    format!("deleted once its hooks succeed ({policy})"),
                    "drop that delete policy, or make it no hook",
                ),
                None => (
                    format!(
                        "that no install, upgrade or sync creates ({})",
                        hook.annotation
                    ),
                    "make it no hook",
                ),
            };
            self.report(
                Code::MissingObject,
                r.key.as_deref(),
                format!(
                    "the proposed state has this {} only as a hook {why}: it is not there \
                     after the change; {fix}",
                    r.kind
                ),
            );
            return;
        }
        let other = ObjectId {
            kind: r.kind.other(),
            ..target.clone()
        };
        if ctx.proposed.contains_key(&other) {
            self.report(
                Code::Reclassified,
                r.key.as_deref(),
                format!(
                    "the proposed state has no {} of this name, only a {}: moved between kinds while still referenced",
                    r.kind,
                    r.kind.other()
                ),
            );
        } else if current.is_some() {
            self.report(
                Code::MissingObject,
                r.key.as_deref(),
                "the proposed state deletes this object while it is still referenced".into(),
            );
        } else if !kept_by_control_plane(&target, r.key.as_deref()) {
            self.report(
                Code::MissingObject,
                r.key.as_deref(),
                format!(
                    "the object exists in neither the current nor the proposed state \
                     (one that a Job or a controller writes belongs in the current \
                     state: `kubectl get {} {} -n {} -o yaml`, read for its key names only)",
                    target.kind.to_string().to_lowercase(),
                    target.name,
                    target.namespace
                ),
            );
        }
    }

    /// What the API server refuses to change in place: the apply fails for
    /// this object, which keeps what it had, and what the change meant to
    /// bring to it never comes. (Not for a hook: Helm and Argo CD delete
    /// one and make it again, by default.)
    fn refused_in_place(&mut self, object: &ConfigObject) {
        let current = self.current;
        if let Some(cur) = current.filter(|_| object.hook.is_none()) {
            if cur.immutable && cur.keys != object.keys {
                self.report(
                    Code::ImmutableChanged,
                    None,
                    "the object is immutable but the proposed state changes its keys".into(),
                );
            }
            if let (Some(was), Some(new)) = (&cur.secret_type, &object.secret_type)
                && was != new
                && object.sets_type_in_place()
            {
                self.report(
                    Code::ImmutableChanged,
                    None,
                    format!(
                        "the proposed state changes this Secret's type from {was} to {new}, which \
                     the API server refuses: the apply fails for it, and it keeps its old keys \
                     (delete it in an earlier step, or give it a new name)"
                    ),
                );
            }
        }
    }

    /// The key the reference names is not in the proposed object.
    fn missing_key(&mut self, object: &ConfigObject, key: &str) {
        let (ctx, current) = (self.ctx, self.current);
        let target = self.target.clone();
        let moved = ctx.holders(&target.namespace, key);
        let was_there = current.is_some_and(|c| c.keys.contains(key));
        let mut msg = if was_there {
            "the proposed state removes this key while it is still referenced".to_owned()
        } else {
            "the key exists in neither the current nor the proposed object".to_owned()
        };
        if !moved.is_empty() {
            let moved = moved.join(", ");
            msg.push_str(&if was_there {
                format!("; it is now in {moved} (a stale reference to the old source remains)")
            } else {
                // Not a move: a reference that names the wrong object
                // (a key renamed in a generator, its user not updated).
                format!("; a key of this name is in {moved}, which this reference does not name")
            });
        }
        if let Some(canon) = yaml_boolean(key).filter(|c| object.keys.contains(*c)) {
            msg.push_str(&format!(
                "; the object holds the key {canon}, which an unquoted `{key}:` in its \
                     manifest makes (YAML reads it as a boolean): quote that key"
            ));
        }
        self.report(Code::MissingKey, Some(key), msg);
    }

    /// An image pull secret: the kubelet reads one key of it, from a
    /// Secret of the matching type.
    fn pull_secret(&mut self, object: &ConfigObject) {
        let current = self.current;
        match current {
            Some(current) => {
                if !object.keys.iter().any(|k| pull_key(k))
                    && let Some(had) = current.keys.iter().find(|k| pull_key(k))
                {
                    self.report(
                        Code::MissingKey,
                        Some(had),
                        "the proposed state removes the key the kubelet reads from an image \
                         pull secret: it would skip the secret and pull without credentials"
                            .into(),
                    );
                }
            }
            // A new one must be one the kubelet reads: the key, in a
            // Secret of its type (the API server makes a Secret without a
            // type `Opaque`, and so do the controllers that make them).
            None => {
                let secret_type = object.secret_type.as_deref().unwrap_or("Opaque");
                if !PULL_SECRET_TYPES
                    .iter()
                    .any(|(key, t)| object.keys.contains(*key) && secret_type == *t)
                {
                    let (key, message) = match PULL_SECRET_TYPES
                        .iter()
                        .find(|(key, _)| object.keys.contains(*key))
                    {
                        Some((key, t)) => (
                            *key,
                            format!(
                                "the kubelet reads {key} only from a Secret of type {t}, and \
                                 this new image pull secret is {secret_type}: it would skip it \
                                 and pull without credentials"
                            ),
                        ),
                        None => (
                            PULL_SECRET_KEYS[0],
                            "this new image pull secret has neither .dockerconfigjson nor \
                             .dockercfg: the kubelet would skip it and pull without credentials"
                                .to_owned(),
                        ),
                    };
                    self.report(
                        Code::MissingKey,
                        Some(key),
                        format!(
                            "{message} (if it exists already, give the live Secret in the \
                             current state)"
                        ),
                    );
                }
            }
        }
    }

    /// A bulk load (`envFrom`, a volume without `items`, a volume
    /// plugin's whole Secret): every key it had that goes.
    fn bulk_keys(&mut self, object: &ConfigObject) {
        let (ctx, r, current) = (self.ctx, self.r, self.current);
        let target = self.target.clone();
        let mut before: BTreeSet<&String> =
            current.map(|c| c.keys.iter().collect()).unwrap_or_default();
        if let Some(inv) = ctx.inventory.get(&target) {
            before.extend(inv.iter());
        }
        for key in before {
            if !object.keys.contains(key) {
                let retired = ctx.retired.contains(&(&target, key.as_str()));
                let message = match (r.is_plugin_secret(), retired) {
                    (false, true) => {
                        "the object is bulk-loaded and the proposed state removes this \
                             key, which is retired: the variable or file goes from its pods \
                             (not a failure)"
                    }
                    (false, false) => {
                        "the object is bulk-loaded and the proposed state removes this \
                             key: the variable or file silently disappears"
                    }
                    (true, true) => {
                        "the volume plugin is given every key of this Secret, and the \
                             proposed state removes this key, which is retired: the plugin \
                             no longer gets it (not a failure)"
                    }
                    (true, false) => {
                        "the volume plugin is given every key of this Secret, and the \
                             proposed state removes this key: a mount that needs it fails, \
                             and pods that mount it never start (retire the key if the \
                             plugin does not read it)"
                    }
                };
                self.report(Code::BulkKeyRemoved, Some(key), message.into());
            }
        }
    }
}

/// The key (`true` or `false`) kubectl makes of `word` written as an
/// unquoted map key, if YAML 1.1 reads it as a boolean (`on`, `Yes`, `n`,
/// ...). For `true` and `false` themselves that is the word: a reference
/// to one is missing only where the object holds no such key, so no hint.
fn yaml_boolean(word: &str) -> Option<&'static str> {
    const TRUE: [&str; 4] = ["y", "yes", "on", "true"];
    const FALSE: [&str; 4] = ["n", "no", "off", "false"];
    let is = |words: &[&str]| words.iter().any(|w| w.eq_ignore_ascii_case(word));
    if is(&TRUE) {
        Some("true")
    } else if is(&FALSE) {
        Some("false")
    } else {
        None
    }
}

/// Whether `key` is one the kubelet reads a pull secret's credentials from.
fn pull_key(key: &str) -> bool {
    PULL_SECRET_KEYS.contains(&key)
}

/// A names-only inventory of `manifests`' config objects.
pub fn inventory(manifests: &Manifests) -> Inventory {
    let mut objects = manifests.objects.clone();
    objects.sort_by(|a, b| a.id.cmp(&b.id));
    Inventory {
        version: Inventory::VERSION,
        objects,
    }
}

/// A previous inventory's key names by object: one of another format
/// version, or one that lists an object twice (which of its key lists
/// holds?), is unusable input.
fn inventory_index(inv: &Inventory) -> Result<HashMap<&ObjectId, &BTreeSet<String>>, InputError> {
    const AT: &str = "previous inventory";
    if inv.version != Inventory::VERSION {
        return Err(InputError::Invalid {
            at: AT.into(),
            message: format!(
                "format version {} is not one this build reads (version {})",
                inv.version,
                Inventory::VERSION
            ),
        });
    }
    Ok(
        unique(&inv.objects, |o| &o.id, |first, _| first.id.to_string(), AT)?
            .into_iter()
            .map(|(id, o)| (id, &o.keys))
            .collect(),
    )
}
