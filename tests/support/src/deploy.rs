//! The monitoring files in `deploy/`: alert rules and the Grafana dashboard, parsed, their
//! PromQL parsed, and the metrics they query collected (to check against a real `/metrics`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use promql_parser::parser::Expr;
use promql_parser::util::{walk_expr, ExprVisitor};

pub fn deploy_path(relative: &str) -> PathBuf {
    crate::repo().join("deploy").join(relative)
}

pub fn read(relative: &str) -> String {
    let path = deploy_path(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub const ALERT_RULES: &str = "prometheus/strongsync-alerts.yml";
pub const DASHBOARD: &str = "grafana/strongsync-dashboard.json";

/// One alerting rule.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertRule {
    pub alert: String,
    pub expr: String,
    #[serde(rename = "for")]
    pub for_: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<AlertRule>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

/// The alerting rules, in the rule-file format Prometheus loads.
pub fn alert_rules() -> Vec<AlertRule> {
    let file: RuleFile = serde_yaml_ng::from_str(&read(ALERT_RULES)).expect("alert rules are YAML");
    assert!(!file.groups.is_empty());
    file.groups
        .into_iter()
        .inspect(|g| assert!(!g.name.is_empty()))
        .flat_map(|g| g.rules)
        .collect()
}

/// Every PromQL query of the dashboard's panels and template variables.
pub fn dashboard_queries() -> Vec<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queries.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        let query = variable["query"]["query"].as_str().expect("query");
        // `label_values(metric, label)` is Grafana's, not PromQL: its metric is what counts.
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.split(',').next())
            .expect("a label_values query");
        queries.push(inner.to_owned());
    }
    queries
}

/// Parses `query` (Grafana's interval variables replaced) and returns the metrics it selects.
pub fn metrics_of(query: &str) -> BTreeSet<String> {
    let promql = query
        .replace("$__rate_interval", "1m")
        .replace("$instance", ".*");
    let expr = promql_parser::parser::parse(&promql)
        .unwrap_or_else(|e| panic!("invalid PromQL {query:?}: {e}"));
    let mut names = Names::default();
    walk_expr(&mut names, &expr).expect("walk");
    names.0
}

/// Metrics of strongsync that the alert rules and the dashboard query.
pub fn queried_metrics() -> BTreeSet<String> {
    alert_rules()
        .iter()
        .map(|r| r.expr.clone())
        .chain(dashboard_queries())
        .flat_map(|q| metrics_of(&q))
        .filter(|name| name.starts_with("strongsync_"))
        .collect()
}

#[derive(Default)]
struct Names(BTreeSet<String>);

impl ExprVisitor for Names {
    type Error = std::convert::Infallible;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, Self::Error> {
        let selector = match expr {
            Expr::VectorSelector(vs) => Some(vs),
            Expr::MatrixSelector(ms) => Some(&ms.vs),
            _ => None,
        };
        if let Some(name) = selector.and_then(|vs| vs.name.clone()) {
            self.0.insert(name);
        }
        Ok(true)
    }
}

/// A file mode in a Kubernetes manifest (`defaultMode: 0440`): Kubernetes reads its YAML as
/// YAML 1.1, where a leading 0 makes an octal number; a YAML 1.2 reader sees text, or a
/// decimal number when a manifest was written as JSON.
pub fn kubernetes_mode(value: &serde_yaml_ng::Value) -> Option<u32> {
    match value {
        serde_yaml_ng::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        serde_yaml_ng::Value::String(text) if text.starts_with('0') => {
            u32::from_str_radix(text, 8).ok()
        }
        _ => None,
    }
}

/// The arguments a Kubernetes container is given (`args:`).
pub fn container_args(container: &serde_yaml_ng::Value) -> Vec<String> {
    container["args"]
        .as_sequence()
        .expect("the container's args")
        .iter()
        .map(|a| a.as_str().expect("an argument as text").to_owned())
        .collect()
}

/// The tag `deploy/Dockerfile`'s header builds the image as (`docker build … -t TAG`).
pub fn image_tag() -> String {
    read("Dockerfile")
        .split_whitespace()
        .skip_while(|w| *w != "-t")
        .nth(1)
        .expect("the Dockerfile's build command tags the image")
        .to_owned()
}
