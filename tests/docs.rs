//! The user documentation holds to the code: every relative link and anchor in `README.md` and
//! `docs/` resolves, the settings table of `docs/configuration.md` and the metrics table of
//! `docs/operations.md` are the ones the definitions make, `deploy/strongsync.toml` names every
//! setting and nothing else, and the module graph on the architecture page is the one the code's
//! imports draw, without circles between modules or between files, and the session's rooms depend
//! only downward.
//!
//! `STRONGSYNC_BLESS=1 cargo test --test docs` rewrites the generated parts in place.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use strongsync::config::reference_table;
use strongsync::Config;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every page of `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text of a page without its code: fenced blocks and inline code spans, where a `](` is
/// not a link.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Every link target of a page: what stands in `(…)` after `]`.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut found = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            found.push(target.to_owned());
            rest = &rest[end..];
        }
    }
    found
}

/// The anchors GitHub makes of a page's headings: lower case, punctuation dropped, blanks
/// turned into hyphens, a repeat numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

#[test]
fn every_relative_link_and_anchor_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") || link.is_empty() {
                continue;
            }
            checked += 1;
            let (path, anchor) = match link.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            if !target.exists() {
                broken.push(format!(
                    "{}: {link}: no {}",
                    page.display(),
                    target.display()
                ));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    broken.push(format!("{}: {link}: no heading #{anchor}", page.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the scan broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_anchor_rule_is_githubs() {
    let text = "# Strong sync\n## Quorum rules, per-session quorum and async replicas\n\
                ### The read barrier (`visibility = \"quorum\"`)\n## Strong sync\n";
    let got = anchors(text);
    for want in [
        "strong-sync",
        "quorum-rules-per-session-quorum-and-async-replicas",
        "the-read-barrier-visibility--quorum",
        "strong-sync-1",
    ] {
        assert!(got.contains(want), "{want} in {got:?}");
    }
    assert_eq!(
        links("see [a](x.md#y) and `[b](not-a-link)`\n```\n[c](nor-this)\n```\n"),
        ["x.md#y"]
    );
}

/// Replaces what stands between `begin` and `end` (the marker lines) in `file` with `body`
/// under `STRONGSYNC_BLESS=1`; otherwise asserts that it is `body`.
fn holds_to(file: &Path, begin: &str, end: &str, body: &str) {
    let text = fs::read_to_string(file).unwrap();
    let start = text
        .find(begin)
        .unwrap_or_else(|| panic!("{}: no {begin:?}", file.display()))
        + begin.len();
    let stop = start
        + text[start..]
            .find(end)
            .unwrap_or_else(|| panic!("{}: no {end:?}", file.display()));
    let have = text[start..stop].trim_start_matches('\n');
    if std::env::var_os("STRONGSYNC_BLESS").is_some() {
        let blessed = format!("{}\n{body}{}", &text[..start], &text[stop..]);
        fs::write(file, blessed).unwrap();
        return;
    }
    assert!(
        have == body,
        "{} is not what the code says (STRONGSYNC_BLESS=1 cargo test --test docs rewrites it):\n\
         --- it says\n{have}\n--- the code says\n{body}",
        file.display()
    );
}

#[test]
fn the_settings_table_is_the_one_the_definitions_make() {
    holds_to(
        &repo().join("docs/configuration.md"),
        "<!-- settings: made from the definitions in src/config/ (tests/docs.rs checks it) -->",
        "<!-- end of settings -->",
        &reference_table(),
    );
    // Every setting has a row, by its key.
    let page = fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    for setting in Config::settings() {
        assert!(
            page.contains(&format!("| `{}` |", setting.key)),
            "{} has no row",
            setting.key
        );
    }
}

#[test]
fn the_reload_lists_are_the_ones_the_definitions_make() {
    holds_to(
        &repo().join("docs/configuration.md"),
        "<!-- reload: made from the definitions in src/config/ (tests/docs.rs checks it) -->",
        "<!-- end of reload -->",
        &strongsync::config::reload_lists(),
    );
}

#[test]
fn the_endpoint_table_is_the_one_the_admin_port_serves() {
    holds_to(
        &repo().join("docs/operations.md"),
        "<!-- endpoints: made from src/admin/mod.rs (tests/docs.rs checks it) -->",
        "<!-- end of endpoints -->",
        &strongsync::admin::endpoint_table(),
    );
}

#[test]
fn the_exit_codes_are_the_ones_the_binary_gives() {
    let help = support::proxy::run_strongsync(&["--help"]);
    assert!(help.success(), "{help}");
    let codes = help
        .stdout
        .split_once("Exit codes:\n")
        .expect("--help lists the exit codes")
        .1;
    let table: String = codes
        .lines()
        .filter_map(|line| {
            let (code, meaning) = line.trim().split_once(char::is_whitespace)?;
            Some(format!("| {code} | {} |\n", meaning.trim()))
        })
        .collect();
    holds_to(
        &repo().join("docs/configuration.md"),
        "<!-- exit codes: as `strongsync --help` gives them (tests/docs.rs checks it) -->",
        "<!-- end of exit codes -->",
        &format!("| code | meaning |\n|---|---|\n{table}"),
    );
}

#[test]
fn the_metrics_table_is_the_one_the_definitions_make() {
    holds_to(
        &repo().join("docs/operations.md"),
        "<!-- metrics: made from the definitions in src/metrics.rs (tests/docs.rs checks it) -->",
        "<!-- end of metrics -->",
        &strongsync::metrics::reference_table(),
    );
}

/// The keys `deploy/strongsync.toml` sets or shows commented out (`# key = …`), with their
/// sections.
fn example_keys() -> BTreeSet<String> {
    let text = fs::read_to_string(repo().join("deploy/strongsync.toml")).unwrap();
    let mut section = String::new();
    let mut keys = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start_matches('#').trim();
        if let Some(name) = line
            .strip_prefix("[[")
            .and_then(|l| l.strip_suffix("]]"))
            .or_else(|| line.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        {
            section = name.to_owned();
            continue;
        }
        let Some((key, _)) = line.split_once(" = ") else {
            continue;
        };
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            continue;
        }
        keys.insert(if section.is_empty() {
            key.to_owned()
        } else {
            format!("{section}.{key}")
        });
    }
    keys
}

#[test]
fn the_shipped_example_names_every_setting_and_nothing_else() {
    let defined: BTreeSet<String> = Config::settings()
        .iter()
        .map(|s| s.key.to_owned())
        .collect();
    let shown = example_keys();
    let missing: Vec<_> = defined.difference(&shown).collect();
    let unknown: Vec<_> = shown.difference(&defined).collect();
    assert!(
        missing.is_empty(),
        "deploy/strongsync.toml does not show {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "deploy/strongsync.toml names {unknown:?}, which are no settings"
    );
}

/// The top-level modules of `src/` a file imports (`crate::x`, and `super::x` from a module's
/// own files).
fn imports_of(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
        if let Some(path) = word.strip_prefix("crate::") {
            let first = path.split("::").next().unwrap_or("");
            if modules.contains(first) && first != module {
                found.insert(first.to_owned());
            }
        }
    }
    found
}

/// Every `.rs` file under `dir`, unit tests' own files (`tests.rs`) left out: unit tests may
/// reach anywhere.
fn source_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A file's code: comments may name any module (a doc link is no import), and an inline test
/// module may reach anywhere. A test-only module declared on its own line
/// (`#[cfg(test)] mod testing;`) ends nothing: the imports after it count.
fn code_of(file: &Path) -> String {
    let text = fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let tests_at = lines
        .windows(2)
        .position(|w| {
            w[0].trim() == "#[cfg(test)]"
                && w[1].trim_start().starts_with("mod ")
                && w[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    lines[..tests_at]
        .iter()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The import graph of `src/`'s top-level modules, as the code has it.
fn module_graph() -> BTreeSet<(String, String)> {
    let src = repo().join("src");
    let mut modules = BTreeSet::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !["lib", "main"].contains(&name.as_str()) {
            modules.insert(name);
        }
    }
    let mut edges = BTreeSet::new();
    for module in &modules {
        let mut files = vec![src.join(format!("{module}.rs"))];
        files.extend(source_files(&src.join(module)));
        for file in files.iter().filter(|f| f.exists()) {
            for to in imports_of(module, &code_of(file), &modules) {
                edges.insert((module.clone(), to));
            }
        }
    }
    edges
}

/// The module a file under `src` is (`a/b.rs` and `a/b/mod.rs` are `a::b`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path
        .last()
        .is_some_and(|last| last == "mod" || last == "lib")
    {
        path.pop();
    }
    path
}

/// The file that holds module `path` or, for an item, the module the item is in: the longest
/// prefix of `path` that is a file (`None` for the crate's root).
fn file_of(src: &Path, path: &[String]) -> Option<PathBuf> {
    (1..=path.len()).rev().find_map(|n| {
        let dir = src.join(path[..n].join("/"));
        [dir.with_extension("rs"), dir.join("mod.rs")]
            .into_iter()
            .find(|f| f.exists())
    })
}

/// The paths a file's code names from `crate`, `super` or `self` or from a module it declares,
/// each made absolute, with `use` trees (`a::{b, c::d}`) spread out.
fn paths_named(module: &[String], code: &str) -> Vec<Vec<String>> {
    let children: BTreeSet<&str> = code
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            line.strip_prefix("mod ")?.strip_suffix(';')
        })
        .collect();
    // `use` trees spread into one path each; everything else read word by word.
    let mut paths = Vec::new();
    let mut rest = code;
    let mut words = String::new();
    while let Some(at) = rest.find("use ") {
        let starts_word = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric();
        words.push_str(&rest[..at]);
        let Some(end) = rest[at..].find(';').filter(|_| starts_word) else {
            words.push_str(&rest[at..at + 4]);
            rest = &rest[at + 4..];
            continue;
        };
        let tree: String = rest[at + 4..at + end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        spread("", &tree, &mut paths);
        rest = &rest[at + end..];
    }
    words.push_str(rest);
    paths.extend(
        words
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .filter(|w| w.contains("::"))
            .map(str::to_owned),
    );
    paths
        .iter()
        .filter_map(|path| {
            let mut segments = path.split("::").filter(|s| !s.is_empty());
            let first = segments.next()?;
            let mut absolute: Vec<String> = match first {
                "crate" => Vec::new(),
                "self" => module.to_vec(),
                "super" => module[..module.len().saturating_sub(1)].to_vec(),
                child if children.contains(child) => {
                    let mut m = module.to_vec();
                    m.push(child.to_owned());
                    m
                }
                _ => return None,
            };
            for segment in segments {
                match segment {
                    "super" => {
                        absolute.pop();
                    }
                    "self" | "*" => {}
                    name => absolute.push(name.split(" as ").next()?.to_owned()),
                }
            }
            Some(absolute)
        })
        .collect()
}

/// Spreads a `use` tree: `a::{b, c::{d, e}}` under `prefix` gives `a::b`, `a::c::d`, `a::c::e`.
fn spread(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        out.push(format!(
            "{prefix}{}",
            tree.split("as").next().unwrap_or(tree)
        ));
        return;
    };
    let head = format!("{prefix}{}", &tree[..open]);
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut depth = 0;
    let mut from = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                spread(&head, &inner[from..i], out);
                from = i + 1;
            }
            _ => {}
        }
    }
    if from < inner.len() {
        spread(&head, &inner[from..], out);
    }
}

/// The import graph between the files under `src`, as their code has it: a file imports the
/// file of every module or item it names (what a `mod.rs` re-exports counts as its own). A
/// `mod.rs` reaching into its own folder is the folder's door to its rooms, not an import:
/// its files may use what it defines.
fn file_graph(src: &Path) -> BTreeSet<(PathBuf, PathBuf)> {
    let mut edges = BTreeSet::new();
    for file in source_files(src) {
        let module = module_of(src, &file);
        let folder = (file
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs"))
        .then(|| file.parent().unwrap().to_owned());
        for path in paths_named(&module, &code_of(&file)) {
            let Some(to) = file_of(src, &path) else {
                continue;
            };
            let inward = folder.as_ref().is_some_and(|dir| to.starts_with(dir));
            if to != file && !inward {
                edges.insert((file.clone(), to));
            }
        }
    }
    edges
}

/// The nodes on or between circles of `edges` (none when the graph has no circle): a node
/// that imports nothing left, or that nothing left imports, is taken away until none is.
fn on_circles<T: Ord + Clone>(edges: &BTreeSet<(T, T)>) -> BTreeSet<T> {
    let mut left: BTreeSet<T> = edges
        .iter()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let live = |left: &BTreeSet<T>, (a, b): &(T, T)| left.contains(a) && left.contains(b);
    while let Some(end) = left
        .iter()
        .find(|m| {
            !edges.iter().any(|e| live(&left, e) && e.0 == **m)
                || !edges.iter().any(|e| live(&left, e) && e.1 == **m)
        })
        .cloned()
    {
        left.remove(&end);
    }
    left
}

fn mermaid(edges: &BTreeSet<(String, String)>) -> String {
    let mut out = String::from("```mermaid\nflowchart TD\n");
    for (from, to) in edges {
        out.push_str(&format!("    {from} --> {to}\n"));
    }
    out.push_str("```\n");
    out
}

#[test]
fn the_architecture_page_shows_the_module_graph_and_it_has_no_circle() {
    let edges = module_graph();
    let circle = on_circles(&edges);
    assert!(
        circle.is_empty(),
        "an import circle among {circle:?}: {edges:?}"
    );
    holds_to(
        &repo().join("docs/architecture.md"),
        "<!-- module graph: drawn from the imports in src/ (tests/docs.rs checks it) -->",
        "<!-- end of module graph -->",
        &mermaid(&edges),
    );
}

#[test]
fn no_file_of_src_imports_a_file_that_imports_it_back() {
    let src = repo().join("src");
    let edges = file_graph(&src);
    // The graph is read at all: the session imports sharing's door and the legs below it.
    for (from, to) in [
        ("session/phases.rs", "sharing/mod.rs"),
        ("session/phases.rs", "legs/mod.rs"),
        ("sharing/statements.rs", "sharing/pin.rs"),
        ("legs/own_query.rs", "legs/mod.rs"),
    ] {
        assert!(
            edges.contains(&(src.join(from), src.join(to))),
            "{from} -> {to} not seen"
        );
    }
    let circle = on_circles(&edges);
    let ties: Vec<_> = edges
        .iter()
        .filter(|(a, b)| circle.contains(a) && circle.contains(b))
        .map(|(a, b)| format!("{} -> {}", a.display(), b.display()))
        .collect();
    assert!(circle.is_empty(), "files on an import circle: {ties:#?}");
}

/// The rooms a client's connection passes through depend only downward: the legs on nothing
/// of theirs, sharing and the barrier on the legs, the replica relay on none of them, the
/// session on all; and none of them names strong sync's `Durability`, which a session reaches
/// only through its `Door` (the replica relay, which reports to strong sync, may).
#[test]
fn the_sessions_rooms_depend_only_downward_and_reach_strong_sync_through_its_door() {
    let edges = module_graph();
    let rooms = ["legs", "sharing", "barrier", "replica", "session"];
    let may: [(&str, &[&str]); 5] = [
        ("legs", &[]),
        ("sharing", &["legs"]),
        ("barrier", &["legs"]),
        ("replica", &[]),
        ("session", &["legs", "sharing", "barrier", "replica"]),
    ];
    for (room, allowed) in may {
        let reaches: Vec<&str> = rooms
            .iter()
            .copied()
            .filter(|to| edges.contains(&(room.to_owned(), (*to).to_owned())))
            .collect();
        assert!(
            reaches.iter().all(|to| allowed.contains(to)),
            "{room} imports {reaches:?}; it may import only {allowed:?}"
        );
    }
    assert!(
        edges.contains(&("session".to_owned(), "sharing".to_owned())),
        "the graph is read at all"
    );
    let src = repo().join("src");
    for room in ["legs", "sharing", "barrier", "session"] {
        for file in source_files(&src.join(room)) {
            let code = code_of(&file);
            let names = code
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| word == "Durability");
            assert!(!names, "{} names Durability", file.display());
        }
    }
    // The check reads what it should: the replica relay does name it.
    assert!(code_of(&src.join("replica/mod.rs")).contains("Durability"));
}

/// The control: two files that import each other, in a tree of their own, are a circle the
/// check finds; by an item, by a `use` tree and by a relative path alike.
#[test]
fn the_file_check_finds_a_circle_put_there() {
    let dir = std::env::temp_dir().join(format!("strongsync-circle-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("room")).unwrap();
    let write = |name: &str, text: &str| fs::write(dir.join(name), text).unwrap();
    write("lib.rs", "mod room;\nmod floor;\n");
    write("floor.rs", "pub(crate) fn f() {}\n");
    write(
        "room/mod.rs",
        "mod a;\nmod b;\nuse a::A;\npub(crate) fn mod_item() {}\n",
    );
    for (a_imports, b_imports) in [
        ("use super::b::B;", "use crate::room::a::A;"),
        (
            "use crate::room::{b::B, mod_item};",
            "fn g() { super::a::h() }",
        ),
        ("// use super::b::B;", "use crate::room::a::A;"),
    ] {
        write("room/a.rs", &format!("{a_imports}\npub(crate) struct A;\n"));
        write("room/b.rs", &format!("{b_imports}\nuse crate::floor::f;\n"));
        let circle = on_circles(&file_graph(&dir));
        let commented = a_imports.starts_with("//");
        assert_eq!(
            circle.is_empty(),
            commented,
            "{a_imports} / {b_imports}: {circle:?}"
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}
