//! Fail-closed traps in ConfigMaps and Secrets themselves: values, keys,
//! names and types the API server would refuse, or read otherwise than
//! their text says. Each must be an input error (exit 2) naming the key,
//! never a pass, and never repeat a value.

mod common;

use ate_configguard::{LoadOptions, load_str, manifest::parse_object_id};
use common::*;

#[test]
fn a_config_value_that_is_no_string_is_an_input_error_naming_the_key_not_the_value() {
    // `PORT: 8080` unquoted: the API server refuses the ConfigMap (its data
    // holds strings), so it keeps its old keys while a Deployment applied
    // beside it reads the new one. `A:` with nothing (a Helm value that
    // rendered to nothing): `kubectl apply` and `helm upgrade` delete the
    // key. Both passed, their key counted as there.
    for (data, what) in [
        ("{PORT: 8080}", "data.PORT is a number, not a string"),
        ("{RATIO: 0.5}", "data.RATIO is a number"),
        ("{DEBUG: true}", "data.DEBUG is a boolean"),
        // As kubectl and Helm read YAML (1.1): `y`, `yes`, `on`, `no`, ...
        ("{REDIS: y}", "data.REDIS is a boolean"),
        ("{TLS: on}", "data.TLS is a boolean"),
        ("{CACHE: no}", "data.CACHE is a boolean"),
        // `.inf` and `.nan` are floats to kubectl too (and JSON has none).
        ("{LIMIT: .inf}", "data.LIMIT is a number"),
        ("{LOW: -.Inf}", "data.LOW is a number"),
        ("{X: .NaN}", "data.X is a number"),
        // Other YAML 1.1 numbers kubectl reads: hex, octal, underscores.
        ("{MASK: 0x1F}", "data.MASK is a number"),
        ("{MODE: 0644}", "data.MODE is a number"),
        ("{BIG: 1_000}", "data.BIG is a number"),
        ("{A: }", "data.A has no value (null)"),
        ("{A: null, B: x}", "data.A has no value (null)"),
        ("{NESTED: {a: b}}", "data.NESTED is a map"),
        ("{LIST: [1, 2]}", "data.LIST is a list"),
    ] {
        let doc = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {data}\n");
        let err = load_err(&doc).to_string();
        assert!(err.contains(what), "{data}: {err}");
        for value in ["8080", "0.5", "true", "[1", "{a"] {
            assert!(!err.contains(value), "{data}: the value is named: {err}");
        }
    }
    for (kind, field) in [
        ("Secret", "stringData"),
        ("Secret", "data"),
        ("ConfigMap", "binaryData"),
    ] {
        let doc =
            format!("apiVersion: v1\nkind: {kind}\nmetadata: {{name: c}}\n{field}: {{K: 1}}\n");
        let err = load_err(&doc).to_string();
        assert!(err.contains(&format!("{field}.K is a number")), "{err}");
    }
    // JSON too; and a SealedSecret's ciphertexts, an ExternalSecret's
    // template.
    let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"N":1}}"#;
    assert!(load_err(json).to_string().contains("data.N is a number"));
    let sealed = "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: s}\nspec:\n  encryptedData: {K: 12}\n";
    assert!(
        load_err(sealed)
            .to_string()
            .contains("encryptedData.K is a number")
    );
    // Quoted, as `kubectl get -o yaml` prints it, it is a string.
    let quoted =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {PORT: \"8080\", E: \"\"}\n";
    assert_eq!(load(quoted).objects[0].keys.len(), 2);
    // Another kind's `data` may hold anything.
    let other =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\ndata: {n: 1, m: null}\n";
    assert!(load_str(other, "t.yaml", &LoadOptions::default()).is_ok());
}

#[test]
fn a_secret_data_or_binary_data_value_that_is_not_base64_is_an_input_error_naming_the_key_only() {
    // Plain text in a Secret's `data` (meant for `stringData`): the API
    // server refuses the Secret ("illegal base64 data"), so it keeps its
    // old keys while a Deployment applied beside it reads the new one.
    // This passed, its key counted as there.
    let secret = |value: &str| {
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ndata:\n  PASSWORD: {value}\n")
    };
    for bad in [
        "hunter2",
        "'hunter2!'",
        "QQ",
        "Q===",
        "'===='",
        "QQ==QQ==",
        "'QU JD'",
        "QUJD-_8=",
        "'=QQ='",
        "'QUJD\\tREVG'",
    ] {
        let err = load_err(&secret(bad)).to_string();
        assert!(
            err.contains("data.PASSWORD is not base64 (plain text belongs in stringData)")
                && err.contains("refuses the Secret"),
            "{bad}: {err}"
        );
        let shown = bad.trim_matches('\'');
        assert!(!err.contains(shown), "{bad}: the value is named: {err}");
    }
    // What the API server decodes: whole groups of four, `=` or `==` at
    // the end, line breaks anywhere (a block scalar of a long value).
    for good in [
        "''",
        "QQ==",
        "QUI=",
        "QUJD",
        "aHVudGVyMg==",
        "+/+/",
        "|\n    QUJD\n    REVG\n",
        "\"QUJD\\r\\nREVG\"",
    ] {
        let m = load(&secret(good));
        assert!(m.objects[0].keys.contains("PASSWORD"), "{good}");
    }
    // A ConfigMap's binaryData is base64 too; its data and a Secret's
    // stringData are text.
    let err = load_err(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nbinaryData: {ca.der: not-base64}\n",
    )
    .to_string();
    assert!(
        err.contains("binaryData.ca.der is not base64: the API server refuses the ConfigMap"),
        "{err}"
    );
    assert!(!err.contains("not-base64"), "{err}");
    for text in [
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {A: hello world}\n",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {A: hello world}\n",
        // JSON: the same rule.
        r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"A": "aGk="}}"#,
        // A SealedSecret's template and an ExternalSecret's are templates.
        "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {name: s}\nspec:\n  encryptedData: {A: AgB}\n  template:\n    data: {B: 'user={{ .A }}'}\n",
    ] {
        assert!(
            load_str(text, "t.yaml", &LoadOptions::default()).is_ok(),
            "{text}"
        );
    }
    let json = r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"A": "hi there"}}"#;
    assert!(load_err(json).to_string().contains("data.A is not base64"));
}

#[test]
fn a_config_object_whose_values_total_more_than_1_mib_is_an_input_error() {
    // The API server refuses a ConfigMap or Secret whose values total more
    // than 1 MiB (a dashboard bundle that grew), so it keeps its old keys
    // while the workloads applied beside it read the new ones. This passed.
    const MIB: usize = 1 << 20;
    let text = |n: usize| "a".repeat(n);
    // Base64 of n bytes (n a multiple of 3): 4n/3 characters.
    let b64 = |n: usize| "QUJD".repeat(n / 3);
    let cm = |data: &str, binary: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{{data}}}\nbinaryData: {{{binary}}}\n"
        )
    };
    let secret = |data: &str, string: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ndata: {{{data}}}\nstringData: {{{string}}}\n"
        )
    };
    let refused = |doc: &str, kind: &str| {
        let err = load_err(doc).to_string();
        assert!(
            err.contains("its values total more than 1 MiB (1048576 bytes")
                && err.contains(&format!("the {kind} keeps the keys it had")),
            "{err}"
        );
        assert!(
            !err.contains("aaaa") && !err.contains("QUJD"),
            "a value is named"
        );
    };
    // Exactly 1 MiB loads; one byte more is refused, counted across keys.
    let half = MIB / 2;
    assert!(
        load(&cm(&format!("a: {}, b: {}", text(half), text(half)), "")).objects[0]
            .keys
            .len()
            == 2
    );
    refused(
        &cm(&format!("a: {}, b: {}", text(half), text(half + 1)), ""),
        "ConfigMap",
    );
    // binaryData counts decoded: 4/3 MiB of base64 is 1 MiB of bytes.
    let mib3 = MIB / 3 * 3; // 1,048,575
    assert!(
        load(&cm("a: x", &format!("b: {}", b64(mib3)))).objects[0]
            .keys
            .len()
            == 2
    );
    refused(&cm("a: xy", &format!("b: {}", b64(mib3))), "ConfigMap");
    // Padding decodes to fewer bytes: `QQ==` is one, `QUI=` two.
    let padded = load(&cm(&format!("a: {}", text(MIB - 3)), "b: QQ==, c: QUI="));
    assert_eq!(padded.objects[0].keys.len(), 3);
    refused(
        &cm(&format!("a: {}", text(MIB - 2)), "b: QQ==, c: QUI="),
        "ConfigMap",
    );
    // A Secret's data counts decoded and its stringData as text, together.
    assert!(
        load(&secret(&format!("a: {}", b64(mib3)), "b: x")).objects[0]
            .keys
            .len()
            == 2
    );
    refused(&secret(&format!("a: {}", b64(mib3)), "b: xy"), "Secret");
    refused(&secret("", &format!("b: {}", text(MIB + 1))), "Secret");
    // A stringData key that overwrites a data key replaces its bytes: the
    // overwritten value is not counted on top.
    assert!(
        load(&secret(&format!("a: {}", b64(mib3)), "a: xy")).objects[0]
            .keys
            .len()
            == 1
    );
    refused(
        &secret("a: QUJD", &format!("a: {}", text(MIB + 1))),
        "Secret",
    );
}

#[test]
fn a_key_the_api_server_refuses_is_an_input_error() {
    // A chart that keys its files by path (`conf/app.yaml`): the API server
    // refuses the whole ConfigMap, which keeps its old keys, while the
    // Deployment applied beside it reads the new ones. It passed, every
    // key counted as there.
    let long = "k".repeat(254);
    for key in ["conf/app.yaml", "a b", "..x", ".", "é", "", long.as_str()] {
        let doc = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {{\"{key}\": v}}\n"
        );
        let err = load_err(&doc).to_string();
        assert!(
            err.contains(&format!("data key {key:?} is no key the API server takes")),
            "{key}: {err}"
        );
    }
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {\"a/b\": v}\n";
    assert!(
        load_err(secret)
            .to_string()
            .contains("stringData key \"a/b\"")
    );
    let external = "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: e}\nspec:\n  data:\n  - secretKey: db/password\n    remoteRef: {key: db}\n";
    let err = load_err(external).to_string();
    assert!(
        err.contains("spec.data[0].secretKey key \"db/password\""),
        "{err}"
    );
    // One key in a ConfigMap's data and binaryData is refused too; a
    // Secret's stringData overwrites its data.
    let both = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: v}\nbinaryData: {k: AA==}\n";
    assert!(
        load_err(both)
            .to_string()
            .contains("in both data and binaryData")
    );
    let overwrite =
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: dg==}\nstringData: {k: v}\n";
    assert_eq!(load(overwrite).objects[0].keys.len(), 1);
    // What it takes.
    let fine = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {.dockerconfigjson: e30=, tls.crt: eA==, A_B-c.d9: eA==}\n";
    assert_eq!(load(fine).objects[0].keys.len(), 3);
}

#[test]
fn a_namespace_or_config_object_name_the_api_server_refuses_is_an_input_error() {
    let cm =
        |meta: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {meta}\ndata: {{k: v}}\n");
    let long = "n".repeat(64);
    for ns in [
        "Prod",
        "prod_1",
        "-prod",
        "prod-",
        "a.b",
        "pr od",
        long.as_str(),
    ] {
        let err = load_err(&cm(&format!("{{name: app, namespace: \"{ns}\"}}"))).to_string();
        assert!(
            err.contains(&format!("metadata.namespace {ns:?} is no namespace name")),
            "{ns}: {err}"
        );
    }
    // The namespace given for manifests without one: an empty or bad one
    // would put them where nothing else is, and a change to `prod/app`
    // would pass unseen.
    for ns in ["", "Prod", long.as_str()] {
        let options = LoadOptions {
            default_namespace: ns.into(),
            ..LoadOptions::default()
        };
        let doc = format!(
            "{}---\n{}",
            cm("{name: app}"),
            deployment("web", "      containers: [{name: c, image: x}]\n")
        );
        let err = load_str(&doc, "test.yaml", &options)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "the namespace given for such manifests (--namespace, \
                 LoadOptions::default_namespace), {ns:?}, is no namespace name"
            )),
            "{ns}: {err}"
        );
        // Unused, it is not an error: every manifest names its namespace.
        let placed = cm("{name: app, namespace: prod}");
        assert_eq!(
            load_str(&placed, "test.yaml", &options)
                .unwrap()
                .objects
                .len(),
            1
        );
    }
    let long_name = "a".repeat(254);
    for name in [
        "App",
        "app_1",
        "-app",
        "app.",
        "a..b",
        "app/x",
        long_name.as_str(),
    ] {
        for kind in ["ConfigMap", "Secret"] {
            let doc = format!("apiVersion: v1\nkind: {kind}\nmetadata: {{name: \"{name}\"}}\n");
            let err = load_err(&doc).to_string();
            assert!(
                err.contains(&format!(
                    "{kind} name {name:?} is no name the API server takes"
                )),
                "{kind} {name}: {err}"
            );
        }
    }
    // What it takes: a subdomain's parts have no length bound of their own.
    let fine = cm(&format!(
        "{{name: a-1.b2.{}, namespace: {}}}",
        "c".repeat(100),
        "n".repeat(63)
    ));
    assert_eq!(load(&fine).objects.len(), 1);
    // And what `--delete` names: a mistyped namespace names nothing the
    // current state holds, so the deletion would pass unchecked.
    for id in ["ConfigMap/Prod/app", "Secret/prod_1/app", "Secret/prod/App"] {
        let err = parse_object_id(id).unwrap_err().to_string();
        assert!(
            err.contains("--delete") && err.contains("is no"),
            "{id}: {err}"
        );
    }
    assert!(parse_object_id("configmap/prod/app.v2").is_ok());
    // kubectl's short name for a ConfigMap, in any case.
    let short = parse_object_id("CM/prod/app").unwrap();
    assert_eq!(short, parse_object_id("ConfigMap/prod/app").unwrap());
    // Typed objects too.
    let mut typed = k8s_openapi::api::core::v1::ConfigMap::default();
    typed.metadata.name = Some("Bad_Name".into());
    let err = ate_configguard::manifest::ConfigObject::from_config_map(&typed, "default")
        .unwrap_err()
        .to_string();
    assert!(err.contains("Bad_Name"), "{err}");
    typed.metadata.name = Some("good".into());
    let err = ate_configguard::manifest::ConfigObject::from_config_map(&typed, "")
        .unwrap_err()
        .to_string();
    assert!(err.contains("namespace"), "{err}");
    assert!(ate_configguard::manifest::ConfigObject::from_config_map(&typed, "default").is_ok());
}

#[test]
fn a_secret_without_the_keys_its_type_requires_is_an_input_error() {
    // The API server refuses a kubernetes.io/tls Secret without tls.key
    // (and the like), and the Secret keeps what it had. It passed.
    for (t, keys, missing) in [
        ("kubernetes.io/tls", "{tls.crt: eA==}", "tls.key"),
        (
            "kubernetes.io/dockerconfigjson",
            "{config.json: eA==}",
            ".dockerconfigjson",
        ),
        ("kubernetes.io/dockercfg", "{}", ".dockercfg"),
        ("kubernetes.io/ssh-auth", "{id: eA==}", "ssh-privatekey"),
        (
            "kubernetes.io/basic-auth",
            "{user: eA==}",
            "username or password",
        ),
    ] {
        let doc = format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ntype: {t}\ndata: {keys}\n"
        );
        let err = load_err(&doc).to_string();
        assert!(
            err.contains(&format!(
                "Secret/default/s is of type {t} without {missing}"
            )),
            "{err}"
        );
    }
    // With them (from data or stringData), or of another type, it loads.
    for (t, keys) in [
        (
            "kubernetes.io/tls",
            "data: {tls.crt: eA==}\nstringData: {tls.key: k}",
        ),
        ("kubernetes.io/basic-auth", "stringData: {password: p}"),
        ("Opaque", "data: {}"),
        ("example.com/custom", "data: {}"),
    ] {
        let doc =
            format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ntype: {t}\n{keys}\n");
        assert!(
            load_str(&doc, "t.yaml", &LoadOptions::default()).is_ok(),
            "{doc}"
        );
    }
    // A Secret an ExternalSecret makes, of a type its template names.
    let external = "apiVersion: external-secrets.io/v1\nkind: ExternalSecret\nmetadata: {name: e}\nspec:\n  target:\n    template: {type: kubernetes.io/tls}\n  data:\n  - secretKey: tls.crt\n    remoteRef: {key: cert}\n";
    assert!(load_err(external).to_string().contains("without tls.key"));
}

#[test]
fn an_unquoted_config_value_is_read_as_kubectl_reads_it() {
    // What `kubectl annotate --local -f f.yaml x=y -o json` printed for
    // `data: {K: <spelling>}`: a JSON string, number, boolean or null (or
    // an error). Anything but a string is refused by the API server (or,
    // null, deleted by `kubectl apply`), so it must be unusable input here.
    let kubectl = [
        ("0o17", "number"),
        ("0b101", "number"),
        ("+.5", "number"),
        ("08", "number"),
        ("010", "number"),
        ("0777", "number"),
        ("0x_1F", "number"),
        ("1e3", "number"),
        ("1E3", "number"),
        (".5e3", "number"),
        ("0.", "number"),
        ("-0", "number"),
        ("0x1f", "number"),
        ("+0x1", "number"),
        ("-0b1", "number"),
        ("1.5E+3", "number"),
        (".INF", "error"),
        ("~", "null"),
        ("Null", "null"),
        ("True", "boolean"),
        ("y", "boolean"),
        ("Y", "boolean"),
        ("yes", "boolean"),
        ("On", "boolean"),
        ("1:20", "string"),
        ("2001-12-14", "string"),
        ("=", "string"),
        ("nULL", "string"),
        (".iNf", "string"),
        ("-.nan", "string"),
        ("0o", "string"),
        ("0x", "string"),
        ("+", "string"),
        (".", "string"),
        ("1.2.3", "string"),
        ("12e", "string"),
        ("_0", "string"),
    ];
    let read = |spelling: &str| {
        let doc = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata:\n  K: {spelling}\n"
        );
        load_str(&doc, "t.yaml", &LoadOptions::default())
    };
    for (spelling, kind) in kubectl {
        let ours = read(spelling);
        match kind {
            "string" => assert!(ours.is_ok(), "{spelling}: {ours:?}"),
            _ => assert!(ours.is_err(), "{spelling} is {kind} to kubectl, and passed"),
        }
    }
    // The spellings read otherwise (the README names them): numbers to
    // kubectl, strings here; a string to kubectl, a boolean here.
    for spelling in ["0X1F", "1__0", "1_0.5", "0_", "1_", "tRUE"] {
        let ours = read(spelling);
        assert_eq!(ours.is_ok(), spelling != "tRUE", "{spelling}: {ours:?}");
    }
}

#[test]
fn an_unquoted_key_that_yaml_reads_as_a_boolean_or_a_number_is_the_key_kubectl_makes_of_it() {
    // kubectl reads `on:` as the boolean true and `010:` as the number 8,
    // and the object then holds the keys `true` and `8`: a workload reading
    // key `on` finds none. The guard counted the keys as written.
    let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  on: a\n  N: b\n  5: c\n  010: d\n  1.50: e\n  0x1F: f\n  \"yes\": g\n  'off': h\n";
    let manifests = load(doc);
    let keys: Vec<&str> = manifests.objects[0]
        .keys
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["1.5", "31", "5", "8", "false", "off", "true", "yes"],
        "as `kubectl annotate --local -o json` printed them"
    );
    // A workload reading key `on` finds none, and the finding says why.
    let workload = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: x\n    env:\n    - name: FLAG\n      valueFrom: {configMapKeyRef: {name: c, key: \"on\"}}\n";
    let state = format!("{doc}---\n{workload}");
    let report = run(&state, &state);
    // One finding, for the pod in both states.
    assert_eq!(report.failures.len(), 1, "{report:?}");
    for f in &report.failures {
        assert_eq!(f.side, Some(ate_configguard::Side::Both));
        assert_eq!(f.code, "missing-key");
        assert!(
            f.message
                .contains("the object holds the key true, which an unquoted `on:`"),
            "{}",
            f.message
        );
    }
    // Each spelling hints at the boolean it is, and only at that one: a
    // key that is no boolean gets no hint though the object holds both.
    for (key, hint) in [
        ("N", Some("false")),
        ("Off", Some("false")),
        ("YES", Some("true")),
        ("y", Some("true")),
        ("OTHER", None),
        ("nope", None),
    ] {
        let reads = workload.replace("key: \"on\"", &format!("key: \"{key}\""));
        let state = format!("{doc}---\n{reads}");
        let report = run(&state, &state);
        let f = &report.failures[0];
        assert_eq!(f.key.as_deref(), Some(key));
        match hint {
            Some(canon) => assert!(
                f.message.contains(&format!(
                    "the object holds the key {canon}, which an unquoted `{key}:`"
                )),
                "{}",
                f.message
            ),
            None => assert!(!f.message.contains("quote"), "{key}: {}", f.message),
        }
    }
    // No hint where the object holds no such key either.
    let plain = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  N2: b\n";
    let state = format!("{plain}---\n{workload}");
    let report = run(&state, &state);
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(
        report.failures.iter().all(|f| !f.message.contains("quote")),
        "{report:?}"
    );
    // Two spellings of one key are one key twice.
    let twice =
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  yes: a\n  true: b\n";
    let err = load_err(twice).to_string();
    assert!(
        err.contains("duplicate key `true` (YAML reads this unquoted key as a boolean"),
        "{err}"
    );
    // A null key is refused, as kubectl refuses it.
    let null = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  ~: a\n";
    let err = load_str(null, "t.yaml", &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("t.yaml") && err.contains("null"), "{err}");
    // JSON keys are strings as written.
    let json = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"on":"a","010":"b"}}"#;
    let keys = &load(json).objects[0].keys;
    assert!(keys.contains("on") && keys.contains("010"), "{keys:?}");
}

#[test]
fn a_service_account_token_secret_that_names_no_account_is_an_input_error() {
    // The API server refuses a kubernetes.io/service-account-token Secret
    // without the kubernetes.io/service-account.name annotation, so the
    // control plane never writes its token, ca.crt and namespace. The guard
    // counted those keys as there, and a workload reading `token` passed.
    let token = "type: kubernetes.io/service-account-token";
    let annotated = "annotations: {kubernetes.io/service-account.name: robot}";
    for (doc, what) in [
        (
            format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: t}}\n{token}\n"),
            "the Secret is of type",
        ),
        (
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: t, annotations: {{a: b}}}}\n{token}\n"
            ),
            "the Secret is of type",
        ),
        (
            format!(
                "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {{name: t}}\nspec:\n  encryptedData: {{}}\n  template:\n    {token}\n    metadata: {{name: t}}\n"
            ),
            "spec.template is of type",
        ),
        (
            format!(
                "apiVersion: secrets-store.csi.x-k8s.io/v1\nkind: SecretProviderClass\nmetadata: {{name: p}}\nspec:\n  provider: vault\n  secretObjects:\n  - secretName: t\n    {token}\n"
            ),
            "spec.secretObjects[0] is of type",
        ),
    ] {
        let err = load_err(&doc).to_string();
        assert!(
            err.contains(what)
                && err.contains("without the kubernetes.io/service-account.name annotation"),
            "{doc}: {err}"
        );
    }
    // Annotated, it loads, with the keys the control plane writes.
    let doc =
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: t, {annotated}}}\n{token}\n");
    let keys = &load(&doc).objects[0].keys;
    assert!(
        ["ca.crt", "namespace", "token"]
            .iter()
            .all(|k| keys.contains(*k)),
        "{keys:?}"
    );
    let sealed = format!(
        "apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata: {{name: t}}\nspec:\n  encryptedData: {{}}\n  template:\n    {token}\n    metadata: {{name: t, {annotated}}}\n"
    );
    assert!(load(&sealed).objects[0].keys.contains("token"));
    let spc = format!(
        "apiVersion: secrets-store.csi.x-k8s.io/v1\nkind: SecretProviderClass\nmetadata: {{name: p}}\nspec:\n  provider: vault\n  secretObjects:\n  - secretName: t\n    {token}\n    {annotated}\n"
    );
    assert!(load(&spc).objects[0].keys.contains("token"));
}
