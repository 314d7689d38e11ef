//! What differs from CPython, from one source: `differences.tsv` beside
//! this crate's README. The README's table ("Python in Tether: what
//! differs") must be [`readme_table`] (a test below fails otherwise), and
//! the `run_script` description (`tether-client`'s `script.rs`) carries each
//! row's phrase for the model, read from the same file, so the two cannot
//! drift.

/// The file: comment lines start with `#`; every other line is one row,
/// `Python<TAB>In a Tether script<TAB>Why<TAB>phrase for the model`.
pub const DIFFERENCES_TSV: &str = include_str!("../differences.tsv");

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Difference {
    /// What a script does, in Python's terms (markdown).
    pub python: &'static str,
    /// What it gets in Tether (markdown).
    pub tether: &'static str,
    /// Why; may be empty.
    pub why: &'static str,
    /// What the `run_script` description says of it; empty for rows the
    /// model need not be told.
    pub phrase: &'static str,
}

/// The rows, in order. A line with fewer than four cells gives empty ones.
pub fn differences() -> impl Iterator<Item = Difference> {
    DIFFERENCES_TSV.lines().filter(|line| !line.is_empty() && !line.starts_with('#')).map(|line| {
        let mut cells = line.split('\t');
        let mut next = || cells.next().unwrap_or_default();
        Difference { python: next(), tether: next(), why: next(), phrase: next() }
    })
}

/// The markdown table the README must hold, header included, one line per row.
pub fn readme_table() -> String {
    let mut table = String::from("| Python | In a Tether script | Why |\n|---|---|---|\n");
    for row in differences() {
        for cell in [row.python, row.tether, row.why] {
            table.push('|');
            if !cell.is_empty() {
                table.push(' ');
                table.push_str(cell);
            }
            table.push(' ');
        }
        table.push_str("|\n");
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_table_is_the_differences_file() {
        let readme = include_str!("../README.md");
        let table = readme_table();
        assert!(
            readme.contains(&table),
            "guest-sdk/python/README.md's table differs from differences.tsv; it should read:\n{table}"
        );
    }

    #[test]
    fn every_row_has_its_cells_and_the_model_is_told_the_main_ones() {
        let rows: Vec<Difference> = differences().collect();
        assert!(rows.len() >= 10, "{rows:?}");
        assert!(rows.iter().all(|row| !row.python.is_empty() && !row.tether.is_empty()), "{rows:?}");
        let phrases: Vec<&str> = rows.iter().map(|row| row.phrase).filter(|phrase| !phrase.is_empty()).collect();
        assert!(phrases.iter().any(|phrase| phrase.contains("class inheritance works")), "{phrases:?}");
        assert!(phrases.iter().any(|phrase| phrase.contains("special method such as __getitem__")), "{phrases:?}");
        assert!(phrases.iter().any(|phrase| phrase.contains("!repr")), "{phrases:?}");
    }
}
