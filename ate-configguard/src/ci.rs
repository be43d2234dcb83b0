//! The CLI's CI-native report formats: GitHub workflow annotations and
//! SARIF 2.1.0 (code scanning, GitLab, Azure DevOps), each finding placed
//! at the file and line where its workload's document starts.

use std::collections::BTreeMap;

use ate_configguard::{Finding, Report, Severity};
use serde_sarif::sarif::{
    ArtifactLocation, Invocation, Location, Message, MultiformatMessageString, Notification,
    PhysicalLocation, Region, ReportingDescriptor, Result as SarifResult, ResultLevel, Run, Sarif,
    Suppression, Tool, ToolComponent,
};

/// A workflow command's data, escaped as GitHub reads it.
fn data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value, escaped.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}

/// One `::error` / `::warning` line per finding (`::notice` per waived
/// one), then the summary line `checked` ends.
pub(crate) fn github(report: &Report, checked: &str) -> String {
    let mut out = String::new();
    for f in report.failures.iter().chain(&report.warnings) {
        let command = match f.severity {
            Severity::Failure => "error",
            _ => "warning",
        };
        let mut props = Vec::new();
        if let Some(s) = &f.source {
            props.push(format!("file={}", property(&s.file)));
            props.push(format!("line={}", s.line));
        }
        props.push(format!("title={}", property(f.code.as_str())));
        out.push_str(&format!(
            "::{command} {}::{}\n",
            props.join(","),
            data(&f.to_string())
        ));
    }
    for f in &report.waived {
        let mut props = Vec::new();
        if let Some(s) = &f.source {
            props.push(format!("file={}", property(&s.file)));
            props.push(format!("line={}", s.line));
        }
        props.push(format!("title={}", property(&format!("waived {}", f.code))));
        out.push_str(&format!(
            "::notice {}::{}\n",
            props.join(","),
            data(&f.to_string())
        ));
    }
    out.push_str(&format!(
        "{}: {} failure(s), {} warning(s); {checked}\n",
        report.result.as_str().to_uppercase(),
        report.failures.len(),
        report.warnings.len(),
    ));
    out
}

fn located(f: &Finding) -> Option<Vec<Location>> {
    let s = f.source.as_ref()?;
    let region = Region::builder().start_line(s.line as i64).build();
    let physical = PhysicalLocation::builder()
        .artifact_location(ArtifactLocation::builder().uri(s.file.clone()).build())
        .region(region)
        .build();
    Some(vec![
        Location::builder().physical_location(physical).build(),
    ])
}

/// A SARIF 2.1.0 log: one rule per finding code, one result per finding;
/// a waived finding is a result with an external suppression that says
/// by what, as code scanning shows it.
///
/// # Errors
///
/// If the log cannot be encoded.
pub(crate) fn sarif(report: &Report) -> Result<String, serde_json::Error> {
    let findings: Vec<&Finding> = report
        .failures
        .iter()
        .chain(&report.warnings)
        .chain(&report.waived)
        .collect();
    let waived_from = report.failures.len() + report.warnings.len();
    let codes: BTreeMap<&str, usize> = {
        let mut codes: Vec<&str> = findings.iter().map(|f| f.code.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        codes.into_iter().enumerate().map(|(i, c)| (c, i)).collect()
    };
    let rules: Vec<ReportingDescriptor> = codes
        .keys()
        .map(|code| {
            ReportingDescriptor::builder()
                .id(*code)
                .short_description(
                    MultiformatMessageString::builder()
                        .text(format!("ate-configguard: {code}"))
                        .build(),
                )
                .build()
        })
        .collect();
    let results: Vec<SarifResult> = findings
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let level = match f.severity {
                Severity::Failure => ResultLevel::Error,
                _ => ResultLevel::Warning,
            };
            let message = Message::builder().text(f.to_string()).build();
            let mut result = match located(f) {
                Some(locations) => SarifResult::builder()
                    .rule_id(f.code.as_str())
                    .rule_index(codes[f.code.as_str()] as i64)
                    .level(level)
                    .message(message)
                    .locations(locations)
                    .build(),
                None => SarifResult::builder()
                    .rule_id(f.code.as_str())
                    .rule_index(codes[f.code.as_str()] as i64)
                    .level(level)
                    .message(message)
                    .build(),
            };
            if i >= waived_from {
                result.suppressions = Some(vec![
                    Suppression::builder()
                        .kind(serde_json::json!("external"))
                        .justification(f.message.clone())
                        .build(),
                ]);
            }
            result
        })
        .collect();
    let driver = ToolComponent::builder()
        .name("ate-configguard")
        .version(env!("CARGO_PKG_VERSION"))
        .rules(rules)
        .build();
    let run = Run::builder()
        .tool(Tool::builder().driver(driver).build())
        .results(results)
        .build();
    let log = Sarif::builder()
        .version(serde_json::json!("2.1.0"))
        .schema(serde_sarif::sarif::SCHEMA_URL)
        .runs(vec![run])
        .build();
    serde_json::to_string_pretty(&log).map(|s| s + "\n")
}

/// A SARIF log for input the tool could not use (exit 2): no results, and
/// the error as the run's tool execution notification, so a code-scanning
/// upload says why nothing was checked instead of finding no file.
pub(crate) fn sarif_unusable(error: &str) -> Result<String, serde_json::Error> {
    let driver = ToolComponent::builder()
        .name("ate-configguard")
        .version(env!("CARGO_PKG_VERSION"))
        .build();
    let notification = Notification::builder()
        .message(Message::builder().text(error).build())
        .level(serde_json::json!("error"))
        .build();
    let invocation = Invocation::builder()
        .execution_successful(false)
        .exit_code(2_i64)
        .tool_execution_notifications(vec![notification])
        .build();
    let run = Run::builder()
        .tool(Tool::builder().driver(driver).build())
        .invocations(vec![invocation])
        .results(Vec::<SarifResult>::new())
        .build();
    let log = Sarif::builder()
        .version(serde_json::json!("2.1.0"))
        .schema(serde_sarif::sarif::SCHEMA_URL)
        .runs(vec![run])
        .build();
    serde_json::to_string_pretty(&log).map(|s| s + "\n")
}
