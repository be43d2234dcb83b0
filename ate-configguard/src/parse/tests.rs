use super::node::{Node, go_float_key};
use super::node::{VALUE_BYTES, VALUE_DIGESTS};
use super::redact::redact;
use super::{DATA_LIST, documents, split_stream};

#[test]
fn float_keys_are_written_as_kubectl_writes_them() {
    // Each pair: a key as written, and the key `kubectl annotate --local
    // -o json` printed for it (kubectl 1.3x, sigs.k8s.io/yaml).
    for (key, kubectl) in [
        ("1.5", "1.5"),
        ("0.1", "0.1"),
        ("1.0", "1"),
        ("1e3", "1000"),
        (".5", "0.5"),
        ("-1.5", "-1.5"),
        ("0.0001", "0.0001"),
        ("0.00001", "1e-05"),
        ("1e-7", "1e-07"),
        ("0.000123", "0.000123"),
        ("123456.7", "123456.7"),
        ("999999", "999999"),
        ("1e6", "1e+06"),
        ("1e21", "1e+21"),
        ("3.14159265358979", "3.1415927"),
        ("-0.0", "-0"),
        ("007.5", "7.5"),
        (".inf", ".inf"),
    ] {
        let v: f64 = key.replace(".inf", "inf").parse().unwrap();
        assert_eq!(go_float_key(v), kubectl, "{key}");
    }
    assert_eq!(go_float_key(f64::NAN), ".nan");
    assert_eq!(go_float_key(f64::NEG_INFINITY), "-.inf");
    assert_eq!(go_float_key(1e300), ".inf");
}

#[test]
fn data_values_are_dropped_while_parsing() {
    let docs = documents(
        "kind: Secret\napiVersion: v1\ndata:\n  A: c2VjcmV0\nstringData:\n  B: hunter2\n",
        "x.yaml",
    )
    .unwrap();
    let text = format!("{:?}", docs);
    assert!(
        !text.contains("hunter2") && !text.contains("c2VjcmV0"),
        "{text}"
    );
    assert!(text.contains("\"A\"") && text.contains("\"B\""));
}

#[test]
fn annotation_values_are_dropped_while_parsing() {
    // What `kubectl get secret -o yaml` prints for a Secret created by
    // `kubectl apply`: its values again, inside an annotation.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  annotations:\n    \
            kubectl.kubernetes.io/last-applied-configuration: |\n      \
            {\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"stringData\":{\"B\":\"hunter2\"}}\n\
            data:\n  B: aHVudGVyMg==\n";
    let docs = documents(secret, "x.yaml").unwrap();
    let text = format!("{docs:?}");
    assert!(
        !text.contains("hunter2") && !text.contains("aHVudGVy"),
        "{text}"
    );
    assert!(text.contains("last-applied-configuration"), "{text}");
}

#[test]
fn a_data_field_that_is_a_list_or_a_scalar_is_read_without_its_values() {
    // An ExternalSecret's `spec.data` is a list; a SealedSecret's
    // `encryptedData` holds ciphertexts. Neither was readable before
    // (a data field had to be a map), and no value survives.
    let text = "kind: ExternalSecret\nspec:\n  data:\n  - secretKey: password\n    \
            remoteRef: {key: prod/db, property: password}\n  - plain-item\n  - [nested-item]\n---\n\
            kind: SealedSecret\nspec:\n  encryptedData: {token: AgBy3i4OJSWK}\n---\n\
            kind: Other\ndata: hunter2\n";
    let docs = documents(text, "x.yaml").unwrap();
    let debug = format!("{docs:?}");
    for value in ["prod/db", "AgBy3i4", "hunter2", "plain-item", "nested-item"] {
        assert!(!debug.contains(value), "{value} in {debug}");
    }
    let data = docs[0].get("spec").unwrap().get("data").unwrap();
    assert_eq!(
        data.get(DATA_LIST),
        Some(&Node::Seq(vec![
            Node::Map(vec![("secretKey".into(), Node::String("password".into()))]),
            Node::Null,
            Node::Null
        ]))
    );
    let encrypted = &without_digests(docs[1].get("spec").unwrap().get("encryptedData").unwrap());
    // Its key, and the lengths of its value (as text, and decoded).
    assert_eq!(
        encrypted,
        &Node::Seq(vec![
            Node::String("token".into()),
            Node::Map(vec![(
                VALUE_BYTES.into(),
                Node::Seq(vec![
                    Node::Number(12.into()),
                    Node::Number(9.into()),
                    Node::Null
                ])
            )]),
        ])
    );
    assert_eq!(docs[2].get("data"), Some(&Node::Map(Vec::new())));
}

#[test]
fn the_values_of_hook_annotations_are_kept_and_no_others() {
    let job = "kind: Job
metadata:
  annotations:
    helm.sh/hook: pre-upgrade
    \
            helm.sh/hook-weight: \"-1\"\n    note: hunter2\n    \
            helm.sh/hook-delete-policy: hook-succeeded\n    \
            argocd.argoproj.io/hook-delete-policy: HookSucceeded\n    \
            helm.sh/resource-policy: keep\n    \
            argocd.argoproj.io/sync-options: Prune=false\n";
    let docs = documents(job, "x.yaml").unwrap();
    let annotations = docs[0].get("metadata").unwrap().get("annotations").unwrap();
    let value = |k| annotations.get(k).and_then(Node::as_str);
    assert_eq!(value("helm.sh/hook"), Some("pre-upgrade"));
    assert_eq!(value("helm.sh/hook-weight"), Some("-1"));
    assert_eq!(value("helm.sh/hook-delete-policy"), Some("hook-succeeded"));
    assert_eq!(
        value("argocd.argoproj.io/hook-delete-policy"),
        Some("HookSucceeded")
    );
    assert_eq!(value("helm.sh/resource-policy"), Some("keep"));
    assert_eq!(
        value("argocd.argoproj.io/sync-options"),
        Some("Prune=false")
    );
    assert_eq!(annotations.get("note"), Some(&Node::Null));
    assert!(!format!("{docs:?}").contains("hunter2"));
}

#[test]
fn duplicate_keys_are_refused_at_any_depth() {
    for (text, name, key) in [
        ("a: 1\na: 2\n", "x.yaml", "a"),
        ("a:\n  b: 1\n  b: 2\n", "x.yaml", "b"),
        (r#"{"a": {"b": 1, "b": 2}}"#, "x.json", "b"),
        ("data:\n  k: 1\n  k: 2\n", "x.yaml", "k"),
    ] {
        let err = documents(text, name).unwrap_err().to_string();
        assert!(
            err.contains(name) && err.contains("duplicate"),
            "{text}: {err}"
        );
        // The key, once, and the position once (serde_json repeats it).
        assert!(err.trim_end_matches('`').ends_with(key), "{text}: {err}");
        assert_eq!(err.matches("column").count(), 1, "{err}");
    }
    // Inside an ExternalSecret's data item, and among annotations
    // (whose values are otherwise skipped unread). Only JSON reaches
    // these checks: YAML's parser refuses a duplicate itself.
    for text in [
        r#"{"kind": "ExternalSecret", "spec": {"data": [{"secretKey": "a", "secretKey": "b"}]}}"#,
        r#"{"metadata": {"annotations": {"note": "a", "note": "b"}}}"#,
    ] {
        let err = documents(text, "x.json").unwrap_err().to_string();
        assert!(err.contains("duplicate key"), "{err}");
    }
}

#[test]
fn integer_keys_are_their_decimal_digits() {
    let docs = documents("data:\n  -5: eA==\n  7: eA==\nspec:\n  -5: z\n", "x.yaml").unwrap();
    assert_eq!(
        docs[0].get("data").map(without_digests).as_ref(),
        Some(&Node::Seq(vec![
            Node::String("-5".into()),
            Node::String("7".into()),
            // 8 bytes of text, 2 decoded.
            Node::Map(vec![(
                VALUE_BYTES.into(),
                Node::Seq(vec![
                    Node::Number(8.into()),
                    Node::Number(2.into()),
                    Node::Null
                ])
            )]),
        ]))
    );
    assert!(docs[0].get("spec").unwrap().get("-5").is_some());
}

#[test]
fn null_documents_are_no_documents_and_non_finite_numbers_are_refused() {
    let docs = documents("a: 1\n---\n~\n---\nnull\n---\nb: 2\n", "x.yaml").unwrap();
    assert_eq!(docs.len(), 2);
    // `kubectl apply` cannot send `.inf` (JSON has no such number).
    let err = documents("spec:\n  replicas: .inf\n", "x.yaml").unwrap_err();
    assert!(err.to_string().contains("non-finite"), "{err}");
    // A data value of `.inf` is "a number", named by the loader.
    assert!(documents("data:\n  k: .inf\n", "x.yaml").is_ok());
}

#[test]
fn streams_split_only_at_document_markers() {
    let doc = "a: |\n  ---not a marker\nb: 1\n";
    let text = format!("{}---\n", doc).repeat(40_000);
    let chunks = split_stream(&text, 4);
    assert!(chunks.len() > 1);
    let mut joined = String::new();
    let mut line = 0;
    for (first_line, chunk) in &chunks {
        assert_eq!(*first_line, line);
        assert!(
            *first_line == 0 || chunk.starts_with("---"),
            "{:?}",
            &chunk[..10]
        );
        line += chunk.matches('\n').count();
        joined.push_str(chunk);
    }
    assert_eq!(joined, text);
    let parsed = documents(&text, "big.yaml").unwrap();
    assert_eq!(parsed.len(), 40_000);
}

#[test]
fn parse_errors_in_later_chunks_report_the_stream_line() {
    let mut text = "a: 1\n---\n".repeat(100_000);
    text.push_str("bad: [\n");
    let err = documents(&text, "big.yaml").unwrap_err().to_string();
    assert!(err.contains("line 200001"), "{err}");
    // The parser counts from its chunk: its own "at line 100000" used
    // to follow the stream's line, contradicting it.
    assert_eq!(err.matches("line").count(), 1, "{err}");
}

#[test]
fn parse_errors_name_the_location_once_and_no_parser_option() {
    let err = documents("a: 1\nb:\n  c: 1\n  c: 2\n", "x.yaml")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "cannot parse x.yaml at line 4 column 3: duplicate mapping key: c"
    );
}

#[test]
fn redaction_hides_quoted_spans_but_keeps_duplicate_key_names() {
    assert_eq!(
        redact("invalid type: string \"s3cr3t\", expected u64"),
        "invalid type: string \"…\", expected u64"
    );
    assert_eq!(redact("duplicate key `name`"), "duplicate key `name`");
    // serde's expected names are the type's, and kept in full, however
    // many; the value it did not know is not.
    let fields: Vec<String> = (0..40).map(|i| format!("`field_{i}`")).collect();
    let unknown = format!("unknown field `x`, expected one of {}", fields.join(", "));
    assert_eq!(redact(&unknown), unknown);
    assert_eq!(
        redact("unknown variant `s3cr3t`, expected `Always` or `Never`"),
        "unknown variant `…`, expected `Always` or `Never`"
    );
    assert_eq!(
        redact("unknown variant `s3cr3t`, expected `Always`"),
        "unknown variant `…`, expected `Always`"
    );
    // Only a whole list of names ending the message is kept.
    for text in [
        "expected `A`, found `s3cr3t`",
        "unknown variant `x`, expected one of `A`, `s3 cr3t`",
        "unknown variant `x`, expected `A` or `B` or `s3cr3t`",
        "invalid value: string \"s3cr3t\", expected `A` and `s3cr3t`",
    ] {
        assert!(!redact(text).contains("s3cr3t"), "{text}");
        assert!(!redact(text).contains("s3 cr3t"), "{text}");
    }
    // An unclosed span, a second line, a long line: none can echo input.
    assert_eq!(redact("duplicate key `s3cr3t"), "duplicate key `…");
    assert_eq!(redact("bad value\nfound s3cr3t"), "bad value");
    let long = format!("found {}", "x".repeat(300));
    let capped = redact(&long);
    assert_eq!(capped.chars().count(), 161);
    assert!(capped.ends_with('…'));
}

/// A data field's names without its values' keyed digests (different in
/// every run).
fn without_digests(node: &Node) -> Node {
    match node {
        Node::Seq(items) => Node::Seq(
            items
                .iter()
                .filter(|i| i.get(VALUE_DIGESTS).is_none())
                .cloned()
                .collect(),
        ),
        other => other.clone(),
    }
}
