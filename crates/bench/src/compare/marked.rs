//! Blocks of generated text between markers in a markdown file, and the relative links to
//! the plots they show.

use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- compare:begin (written by hkv-bench compare) -->";
const END: &str = "<!-- compare:end -->";

pub(crate) fn relative(path: &Path, from: &Path) -> String {
    let (p, f) = (abs(path), abs(from));
    let common = p
        .components()
        .zip(f.components())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = f.components().count() - common;
    let mut r = PathBuf::new();
    for _ in 0..ups {
        r.push("..");
    }
    for c in p.components().skip(common) {
        r.push(c);
    }
    r.display().to_string()
}

fn abs(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    }
}

/// Replaces the text between the compare markers of `path` (appends it if there are none).
pub(super) fn write_section(path: &Path, section: &str) -> anyhow::Result<()> {
    write_marked(path, BEGIN, END, section)
}

/// Replaces the text between `begin` and `end` in `path` (appends the block if absent).
pub(crate) fn write_marked(
    path: &Path,
    begin: &str,
    end: &str,
    section: &str,
) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let block = format!("{begin}\n{section}{end}\n");
    let new = match (old.find(begin), old.find(end)) {
        (Some(b), Some(e)) if e > b => format!(
            "{}{block}{}",
            &old[..b],
            &old[e + end.len()..].trim_start_matches('\n')
        ),
        _ => format!("{old}\n{block}"),
    };
    std::fs::write(path, new)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_is_replaced_in_place() {
        let dir = std::env::temp_dir().join(format!("hkv-cmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("B.md");
        std::fs::write(&f, "# B\n\nbefore\n").unwrap();
        write_section(&f, "one\n").unwrap();
        write_section(&f, "two\n").unwrap();
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.starts_with("# B\n\nbefore\n"));
        assert!(text.contains("two") && !text.contains("one"));
        assert_eq!(text.matches(BEGIN).count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative(Path::new("/a/docs/bench/x.svg"), Path::new("/a/docs")),
            "bench/x.svg"
        );
        assert_eq!(
            relative(Path::new("/a/t/x.svg"), Path::new("/a/docs")),
            "../t/x.svg"
        );
    }
}
