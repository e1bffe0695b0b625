//! What hwloc's own tools say about a topology, for the tests to compare with: the tree
//! `lstopo` prints, and device localities from `hwloc-calc`. The distance definition is
//! applied here to lstopo's text independently of the crate's code.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

pub struct Line {
    pub indent: usize,
    pub kind: String,
    /// `busid=` of PCI lines, the quoted name of OS device lines.
    pub id: Option<String>,
    /// `id=vendor:device` and `class=` of PCI lines.
    pub vendor: Option<String>,
    pub class: Option<String>,
    pub parent: Option<usize>,
}

/// The tree `lstopo --of console --whole-io -v` prints, `input` an XML file or None (this
/// machine). Err: why the tool could not be run.
pub fn lstopo(input: Option<&Path>) -> Result<Vec<Line>, String> {
    let tool = ["lstopo-no-graphics", "lstopo"]
        .into_iter()
        .find(|t| Command::new(t).arg("--version").output().is_ok())
        .ok_or("neither lstopo-no-graphics nor lstopo is installed (Debian package hwloc)")?;
    let mut cmd = Command::new(tool);
    if let Some(p) = input {
        cmd.arg("--input").arg(p);
    }
    let out = cmd.args(["--of", "console", "--whole-io", "-v"]).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{tool} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines: Vec<Line> = Vec::new();
    // lstopo may say first how it read the input ("assuming ... is a XML file").
    let tree = text.lines().skip_while(|l| !l.starts_with("Machine"));
    for raw in tree {
        let body = raw.trim_start();
        // The summary after the tree starts at column 0 with "depth", "Special depth", ...
        if !lines.is_empty() && raw.len() == body.len() {
            break;
        }
        let indent = (raw.len() - body.len()) / 2;
        let kind = body.split([' ', '(']).next().unwrap_or("").to_owned();
        let field = |key: &str| body.split([' ', '(', ')']).find_map(|w| w.strip_prefix(key)).map(str::to_owned);
        let id = if kind == "Network" || kind == "OpenFabrics" {
            body.rsplit_once(" \"").map(|(_, n)| n.trim_end_matches('"').to_owned())
        } else {
            field("busid=")
        };
        let parent = lines.iter().rposition(|l| l.indent < indent);
        lines.push(Line { indent, kind, id, vendor: field("id="), class: field("class="), parent });
    }
    Ok(lines)
}

fn ancestors(tree: &[Line], mut i: usize) -> Vec<usize> {
    let mut out = vec![i];
    while let Some(p) = tree[i].parent {
        out.push(p);
        i = p;
    }
    out
}

/// The PCI level of a line: PCI lines between it (inclusive) and its host bridge.
fn level(tree: &[Line], i: usize) -> u32 {
    let mut n = 0;
    for a in ancestors(tree, i) {
        match tree[a].kind.as_str() {
            "PCI" | "PCIBridge" => n += 1,
            _ => break,
        }
    }
    n
}

pub fn find(tree: &[Line], id: &str) -> Option<usize> {
    tree.iter().position(|l| l.id.as_deref() == Some(id))
}

/// The distance definition applied to lstopo's tree: from the PCI line `from` to the OS
/// device (or PCI) line `to`.
pub fn distance(tree: &[Line], from: usize, to: usize) -> u32 {
    let up = ancestors(tree, from);
    let lca = ancestors(tree, to).into_iter().find(|a| up.contains(a)).unwrap();
    let top = match tree[lca].kind.as_str() {
        "PCI" | "PCIBridge" => level(tree, lca),
        _ => 0,
    };
    level(tree, from) - top
}

/// lstopo's devices of a crate kind name ("network", "openfabrics", "gpu") by their ids.
pub fn devices(tree: &[Line], kind: &str) -> Vec<usize> {
    (0..tree.len())
        .filter(|&i| {
            let l = &tree[i];
            match kind {
                "network" => l.kind == "Network",
                "openfabrics" => l.kind == "OpenFabrics",
                "gpu" => {
                    l.kind == "PCI"
                        && l.vendor.as_deref().is_some_and(|v| v.starts_with("10de:"))
                        && l.class.as_deref().is_some_and(|c| c.starts_with("03"))
                }
                _ => false,
            }
        })
        .collect()
}

/// Distances lstopo's tree gives from PCI device `from` to every device of `kind`, by name
/// (sorted by name: the comparison is of values, the crate's own order is tested elsewhere).
pub fn distances(tree: &[Line], from: &str, kind: &str) -> BTreeMap<String, u32> {
    let f = find(tree, from).unwrap_or_else(|| panic!("lstopo shows no {from}"));
    devices(tree, kind)
        .into_iter()
        .filter(|&d| d != f)
        .map(|d| (tree[d].id.clone().unwrap(), distance(tree, f, d)))
        .collect()
}

/// The physical numbers of the PUs local to OS device `name`, from hwloc-calc.
pub fn hwloc_calc_locality(input: Option<&Path>, name: &str) -> Result<Vec<u32>, String> {
    let mut cmd = Command::new("hwloc-calc");
    if let Some(p) = input {
        cmd.arg("--input").arg(p);
    }
    let out = cmd
        .args(["--po", "--intersect", "pu", &format!("os={name}")])
        .output()
        .map_err(|e| format!("hwloc-calc is not installed (Debian package hwloc): {e}"))?;
    if !out.status.success() {
        return Err(format!("hwloc-calc failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect())
}
