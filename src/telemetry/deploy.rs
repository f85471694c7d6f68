//! The operators' plug-ins in `deploy/` checked against the registry: every metric an alert, a
//! recording rule or a dashboard query names is one the node exports, as its exporter
//! renders it (`_total` on counters, `_bucket`, `_sum` and `_count` on histograms), or a
//! recording rule the rules file defines. A renamed metric fails here, not on a dashboard.
//!
//! Expressions are parsed with `promql-parser`, so label matchers, strings, functions,
//! keywords and durations never pass for metric names. Each alert must also say how long
//! it waits, how bad it is and where the runbook says what to do: a `runbook_url` to a
//! section of docs/operations.md that exists.

use std::collections::BTreeSet;
use std::path::Path;

use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, VectorSelector};
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

const RULES: &str = "deploy/prometheus/ankusa.rules.yml";
const DASHBOARD: &str = "deploy/grafana/ankusa.json";
const RUNBOOK: &str = "docs/operations.md";

/// Grafana's own duration variables, as a query may use them in a range, and what stands in
/// for each when the query is parsed.
const GRAFANA_DURATIONS: [(&str, &str); 3] = [
    ("$__rate_interval", "5m"),
    ("$__interval", "1m"),
    ("$__range", "1h"),
];

/// One expression and where it was found (an alert, a rule, a panel's target).
#[derive(Debug)]
struct Query {
    place: String,
    expr: String,
}

/// The rules file: its recording rules (record name, expression) and its alerts.
#[derive(Debug, Default)]
struct Rules {
    recorded: Vec<Query>,
    alerts: Vec<Alert>,
}

/// One alerting rule, with what an operator needs beside its expression.
#[derive(Debug)]
struct Alert {
    query: Query,
    wait: Option<String>,
    severity: Option<String>,
    summary: Option<String>,
    description: Option<String>,
    runbook: Option<String>,
}

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every series name the exporter renders once each metric has a value.
fn exported() -> BTreeSet<String> {
    super::audit::touch_every_metric();
    super::dual::touch_every_metric();
    super::lifecycle::touch_every_metric();
    super::remote::touch_every_metric();
    super::watch::touch_every_metric();
    super::render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// The groups of a Prometheus rules file.
fn rules(text: &str) -> Result<Rules, String> {
    let docs = YamlLoader::load_from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let groups = docs
        .first()
        .and_then(|d| d["groups"].as_vec())
        .ok_or("no `groups` list")?;
    let mut out = Rules::default();
    for group in groups {
        let name = group["name"].as_str().ok_or("a group without a name")?;
        let list = group["rules"].as_vec().ok_or("a group without rules")?;
        for rule in list {
            let expr = string(&rule["expr"]).ok_or(format!("{name}: a rule without `expr`"))?;
            let annotation = |key: &str| string(&rule["annotations"][key]);
            if let Some(record) = rule["record"].as_str() {
                out.recorded.push(Query {
                    place: record.to_owned(),
                    expr,
                });
            } else if let Some(alert) = rule["alert"].as_str() {
                out.alerts.push(Alert {
                    query: Query {
                        place: format!("alert {alert}"),
                        expr,
                    },
                    wait: string(&rule["for"]),
                    severity: string(&rule["labels"]["severity"]),
                    summary: annotation("summary"),
                    description: annotation("description"),
                    runbook: annotation("runbook_url"),
                });
            } else {
                return Err(format!("{name}: a rule neither `record` nor `alert`"));
            }
        }
    }
    Ok(out)
}

fn string(y: &Yaml) -> Option<String> {
    y.as_str().map(str::to_owned)
}

/// Every query of a Grafana dashboard: its panels' targets (in rows too) and its variables.
fn dashboard(text: &str) -> Result<Vec<Query>, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let mut out = Vec::new();
    for panel in json["panels"].as_array().ok_or("no `panels`")? {
        panel_queries(panel, &mut out);
        for inner in panel["panels"].as_array().into_iter().flatten() {
            panel_queries(inner, &mut out);
        }
    }
    for var in json["templating"]["list"].as_array().into_iter().flatten() {
        let query = var["query"]["query"].as_str().or(var["query"].as_str());
        if let (Some("query"), Some(q)) = (var["type"].as_str(), query) {
            out.push(Query {
                place: format!("variable {}", var["name"]),
                expr: label_values_selector(q).to_owned(),
            });
        }
    }
    Ok(out)
}

fn panel_queries(panel: &Value, out: &mut Vec<Query>) {
    for target in panel["targets"].as_array().into_iter().flatten() {
        if let Some(expr) = target["expr"].as_str() {
            out.push(Query {
                place: format!("panel {} ({})", panel["title"], target["refId"]),
                expr: expr.to_owned(),
            });
        }
    }
}

/// A variable's `label_values(selector, label)` asks for the selector's series: that is
/// the PromQL in it. Any other query is PromQL itself.
fn label_values_selector(query: &str) -> &str {
    query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|rest| rest.rsplit_once(','))
        .map_or(query, |(selector, _)| selector.trim())
}

/// The metric names an expression selects (a Grafana duration variable stands for a range).
fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let mut promql = expr.to_owned();
    for (var, range) in GRAFANA_DURATIONS {
        promql = promql.replace(var, range);
    }
    let ast = parser::parse(&promql)?;
    let mut names = BTreeSet::new();
    walk(&ast, &mut names)?;
    Ok(names)
}

fn walk(expr: &Expr, names: &mut BTreeSet<String>) -> Result<(), String> {
    match expr {
        Expr::Aggregate(a) => {
            walk(&a.expr, names)?;
            a.param.as_deref().map_or(Ok(()), |p| walk(p, names))
        }
        Expr::Unary(u) => walk(&u.expr, names),
        Expr::Binary(b) => {
            walk(&b.lhs, names)?;
            walk(&b.rhs, names)
        }
        Expr::Paren(p) => walk(&p.expr, names),
        Expr::Subquery(s) => walk(&s.expr, names),
        Expr::VectorSelector(vs) => selector_name(vs, names),
        Expr::MatrixSelector(ms) => selector_name(&ms.vs, names),
        Expr::Call(c) => c.args.args.iter().try_for_each(|a| walk(a, names)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
    }
}

/// A selector's metric: its name, or an exact `__name__` matcher. One that could match any
/// metric cannot be checked, so it is refused.
fn selector_name(vs: &VectorSelector, names: &mut BTreeSet<String>) -> Result<(), String> {
    if let Some(name) = &vs.name {
        names.insert(name.clone());
        return Ok(());
    }
    let by_name = vs.matchers.find_matchers("__name__");
    match by_name.as_slice() {
        [m] if matches!(m.op, MatchOp::Equal) => {
            names.insert(m.value.clone());
            Ok(())
        }
        _ => Err(format!("selector {vs} names no one metric")),
    }
}

/// What `queries` name that is neither exported nor recorded, as `place: name`; an
/// expression that does not parse is an error.
fn unknown_names(
    queries: &[&Query],
    exported: &BTreeSet<String>,
    recorded: &BTreeSet<String>,
) -> Result<Vec<String>, String> {
    let mut unknown = Vec::new();
    for q in queries {
        let names = metric_names(&q.expr).map_err(|e| format!("{}: {e}", q.place))?;
        if names.is_empty() {
            return Err(format!("{}: names no metric", q.place));
        }
        for name in names {
            if !exported.contains(&name) && !recorded.contains(&name) {
                unknown.push(format!("{}: {name}", q.place));
            }
        }
    }
    Ok(unknown)
}

/// The anchors GitHub gives the headings of a Markdown file.
fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(|heading| {
            heading
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

fn loaded() -> (Rules, Vec<Query>) {
    let rules = rules(&read(RULES)).unwrap();
    let panels = dashboard(&read(DASHBOARD)).unwrap();
    (rules, panels)
}

#[test]
fn every_rule_and_dashboard_query_names_an_exported_metric() {
    let (rules, panels) = loaded();
    let exported = exported();
    let recorded: BTreeSet<String> = rules.recorded.iter().map(|r| r.place.clone()).collect();
    assert!(exported.contains("ankusa_lifecycle_confirmed_seconds_bucket"));
    let queries: Vec<&Query> = rules
        .recorded
        .iter()
        .chain(rules.alerts.iter().map(|a| &a.query))
        .chain(&panels)
        .collect();
    assert!(
        rules.alerts.len() >= 10 && panels.len() >= 20,
        "{queries:?}"
    );
    assert_eq!(
        unknown_names(&queries, &exported, &recorded),
        Ok(Vec::new())
    );
    // A recording rule that nothing reads is a name to keep in step for nothing.
    let mut read = BTreeSet::new();
    for q in &queries {
        read.extend(metric_names(&q.expr).unwrap());
    }
    let unread: Vec<&String> = recorded.difference(&read).collect();
    assert!(unread.is_empty(), "recorded, never read: {unread:?}");
}

#[test]
fn a_query_naming_a_metric_the_node_does_not_export_fails() {
    let dashboard_text = r#"{"panels": [
        {"title": "Rows", "targets": [{"refId": "A",
            "expr": "sum by (result) (rate(ankusa_audit_rows_total{result=~\"ok|failed\"}[$__rate_interval]))"}]},
        {"type": "row", "title": "Sinks", "panels": [
            {"title": "Lag", "targets": [{"refId": "B",
                "expr": "max by (sink) (ankusa_lifecycle_sink_lag_secs) > on (sink) group_left ankusa:sink_lag:max"}]}
        ]}
    ]}"#;
    let panels = dashboard(dashboard_text).unwrap();
    let queries: Vec<&Query> = panels.iter().collect();
    let recorded = BTreeSet::from(["ankusa:sink_lag:max".to_owned()]);
    assert_eq!(
        unknown_names(&queries, &exported(), &recorded),
        Ok(vec![
            "panel \"Lag\" (\"B\"): ankusa_lifecycle_sink_lag_secs".to_owned()
        ])
    );
    // A recording rule that is not defined is unknown too.
    assert_eq!(
        unknown_names(&queries, &exported(), &BTreeSet::new()),
        Ok(vec![
            "panel \"Lag\" (\"B\"): ankusa:sink_lag:max".to_owned(),
            "panel \"Lag\" (\"B\"): ankusa_lifecycle_sink_lag_secs".to_owned(),
        ])
    );
}

#[test]
fn names_come_from_selectors_only() {
    let names = metric_names(
        r#"sum without (instance) (rate(ankusa_audit_refused_total{reason="backlog"}[5m] offset 1m))
           / ignoring (reason) group_left
           max by (ceiling) ({__name__="ankusa_audit_ceiling", ceiling="outbox_max_backlog"})
           and on (sink) histogram_quantile(0.99, sum by (le, sink) (rate(ankusa_lifecycle_confirmed_seconds_bucket{sink=~"$sink"}[$__rate_interval])))
           > bool 0.5"#,
    )
    .unwrap();
    assert_eq!(
        names,
        BTreeSet::from([
            "ankusa_audit_ceiling".to_owned(),
            "ankusa_audit_refused_total".to_owned(),
            "ankusa_lifecycle_confirmed_seconds_bucket".to_owned(),
        ])
    );
    assert!(metric_names(r#"{__name__=~"ankusa_.+"}"#).is_err());
    assert!(metric_names("rate(ankusa_audit_rows_total[5m)").is_err());
    assert_eq!(
        label_values_selector("label_values(ankusa_lifecycle_sink_position, sink)"),
        "ankusa_lifecycle_sink_position"
    );
}

#[test]
fn every_alert_says_how_long_how_bad_and_what_to_do() {
    let (rules, _) = loaded();
    let runbook = anchors(&read(RUNBOOK));
    for alert in &rules.alerts {
        let place = &alert.query.place;
        assert!(alert.wait.is_some(), "{place}: no `for`");
        let severity = alert.severity.as_deref();
        assert!(
            matches!(severity, Some("critical" | "warning" | "info")),
            "{place}: severity {severity:?}"
        );
        assert!(alert.summary.is_some(), "{place}: no summary");
        assert!(alert.description.is_some(), "{place}: no description");
        let url = alert.runbook.as_deref().unwrap_or_default();
        let anchor = url.strip_prefix(&format!("{RUNBOOK}#"));
        assert!(
            anchor.is_some_and(|a| runbook.contains(a)),
            "{place}: runbook_url {url:?} is no section of {RUNBOOK}"
        );
    }
}
