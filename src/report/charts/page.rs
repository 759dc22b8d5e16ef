//! A page of charts alone (`llmsurge plot`): the report page's script and chart library
//! drawing chart descriptions that come from several report files.

use super::Chart;
use crate::report::html::{PAGE_CSS, PAGE_JS, UPLOT_CSS, script_safe};
use minijinja::{Environment, context};

const TEMPLATE: &str = include_str!("../templates/plot.html");

/// Renders a self-contained page of `charts`, naming the report `files` drawn from.
pub fn render(title: &str, files: &[String], charts: &[Chart]) -> Result<String, minijinja::Error> {
    let mut env = Environment::new();
    // The name ends in .html: minijinja escapes every value unless marked safe.
    env.add_template("plot.html", TEMPLATE)?;
    let data = serde_json::to_string(&serde_json::json!({ "charts": charts })).map_err(|e| {
        minijinja::Error::new(minijinja::ErrorKind::BadSerialization, e.to_string())
    })?;
    env.get_template("plot.html")?.render(context! {
        title => title,
        version => env!("CARGO_PKG_VERSION"),
        files => files.to_vec(),
        data => script_safe(&data),
        uplot_js => crate::packed::uplot_js(),
        uplot_css => UPLOT_CSS,
        page_js => PAGE_JS,
        page_css => PAGE_CSS,
    })
}
