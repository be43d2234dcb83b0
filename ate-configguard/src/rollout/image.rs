//! `image-identity`: every container names one image, exactly, and starts
//! without asking the registry more than it must.
//!
//! Where this differs from kube-score and Polaris: they demand
//! `imagePullPolicy: Always`. For an image pinned by digest that buys
//! nothing (the digest already names the bytes) and costs a registry
//! round trip on every pod start, so a rollout (and every reschedule)
//! stops when the registry does. Here a digest with `Always` fails, and a
//! mutable tag is the warning (a failure under `--require-digest`).

use container_image_dist_ref::ImgRef;
use k8s_openapi::api::core::v1::Container;

use super::RolloutOptions;
use super::units::Unit;
use crate::model::{Code, Finding, Severity};

/// An image reference taken apart by the distribution grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Image {
    /// The repository, with its registry if it names one.
    pub(super) name: String,
    pub(super) tag: Option<String>,
    /// `algorithm:hex`.
    pub(super) digest: Option<String>,
}

/// The hex length of each digest algorithm a registry serves.
const DIGESTS: [(&str, usize); 3] = [("sha256", 64), ("sha384", 96), ("sha512", 128)];

/// Parses `reference`, or says what is wrong with it (never quoting more
/// than the reference itself).
pub(super) fn parse(reference: &str) -> Result<Image, String> {
    if reference.is_empty() {
        return Err("an empty image".into());
    }
    let parsed = ImgRef::new(reference).map_err(|e| {
        format!(
            "not an image reference ({:?} at character {})",
            e.kind(),
            usize::from(e.index()) + 1
        )
    })?;
    let digest = parsed.digest().map(|d| d.to_str().to_owned());
    if let Some(d) = &digest {
        let (algorithm, hex) = d.split_once(':').unwrap_or((d, ""));
        let known = DIGESTS.iter().find(|(a, _)| *a == algorithm);
        match known {
            None => {
                return Err(format!(
                    "digest algorithm `{algorithm}` is not one registries serve"
                ));
            }
            Some((_, len))
                if hex.len() != *len
                    || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                return Err(format!(
                    "a {algorithm} digest is {len} lowercase hex digits"
                ));
            }
            _ => {}
        }
    }
    Ok(Image {
        name: parsed.name().to_str().to_owned(),
        tag: parsed.tag().map(str::to_owned),
        digest,
    })
}

fn check_container(
    unit: &Unit<'_>,
    c: &Container,
    options: &RolloutOptions,
    out: &mut Vec<Finding>,
) {
    let finding = |severity, message: String| {
        unit.finding(
            Code::ImageIdentity,
            severity,
            Some(&c.name),
            Some("image".into()),
            message,
        )
    };
    let reference = c.image.as_deref().unwrap_or("");
    let image = match parse(reference) {
        Ok(i) => i,
        Err(why) => {
            out.push(finding(
                Severity::Failure,
                format!(
                    "image {reference:?} is {why}: the kubelet cannot pull it; fix the reference"
                ),
            ));
            return;
        }
    };
    let always = c.image_pull_policy.as_deref() == Some("Always");
    match (&image.tag, &image.digest) {
        (Some(tag), Some(_)) => out.push(finding(
            Severity::Failure,
            format!(
                "image {reference} names tag {tag} and a digest: the runtime pulls the digest and \
                 ignores the tag, so the tag says nothing true; keep the digest alone \
                 ({}@DIGEST)",
                image.name
            ),
        )),
        (None, None) => out.push(finding(
            Severity::Failure,
            format!(
                "image {reference} has no tag or digest, so it is `latest`, whatever that is at \
                 each pull; pin a digest (or at least a version tag)"
            ),
        )),
        (Some(tag), None) if tag == "latest" => out.push(finding(
            Severity::Failure,
            format!(
                "image {reference} is `latest`, whatever that is at each pull, and old and new \
                 pods of one revision may run different code; pin a digest or a version tag"
            ),
        )),
        (Some(tag), None) => out.push(finding(
            if options.require_digest {
                Severity::Failure
            } else {
                Severity::Warning
            },
            format!(
                "image {reference} is a mutable tag ({tag}): a rollback or a reschedule may get \
                 other bytes; pin a digest ({}@sha256:...)",
                image.name
            ),
        )),
        (None, Some(_)) => {}
    }
    if image.digest.is_some() && always {
        out.push(finding(
            Severity::Failure,
            "imagePullPolicy Always with a digest asks the registry on every pod start for bytes \
             the digest already names, so rollouts and reschedules stop when the registry does; \
             use IfNotPresent"
                .into(),
        ));
    }
}

/// The image rule for every container and init container of `unit`.
pub(super) fn check(unit: &Unit<'_>, options: &RolloutOptions, out: &mut Vec<Finding>) {
    let init = unit
        .template
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    for c in unit.containers().iter().chain(init) {
        check_container(unit, c, options, out);
    }
}

#[cfg(test)]
mod tests {
    use super::parse;
    use proptest::prelude::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_are_taken_apart_by_the_distribution_grammar() {
        let i = parse("registry.example:5000/team/app:1.4").unwrap();
        assert_eq!(
            (i.name.as_str(), i.tag.as_deref()),
            ("registry.example:5000/team/app", Some("1.4"))
        );
        let i = parse(&format!("app:1.4@{D}")).unwrap();
        assert_eq!(i.tag.as_deref(), Some("1.4"));
        assert_eq!(i.digest.as_deref(), Some(D));
        assert!(parse("app@sha256:abc").is_err(), "short digest");
        assert!(parse("app@md5:0123456789abcdef0123456789abcdef").is_err());
        assert!(parse("App:1").is_err(), "upper case repository");
        assert!(parse("app:").is_err());
        assert!(parse("").is_err());
        assert!(parse("app:1 ").is_err());
    }

    proptest! {
        /// The parser answers every string, never panics.
        #[test]
        fn any_text_is_answered(s in "[a-zA-Z0-9:/@._\\-+ %]{0,80}") {
            let _ = parse(&s);
        }
    }
}
