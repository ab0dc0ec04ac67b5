//! The user's files in the store directory, read once and parsed by the
//! model: a missing file is the defaults, an unreadable or invalid one an
//! error that names it.

use std::path::Path;

use hermes_meter_model::budget::BudgetConfig;
use hermes_meter_model::pricing::PriceTable;
use hermes_meter_store::error::{Error, Result};

/// The built-in price table with the user's pricing file over it.
pub fn load_prices(path: &Path) -> Result<PriceTable> {
    let mut table = PriceTable::default();
    if let Some(text) = read_if_present(path)? {
        table.add_user_prices(&text, path)?;
    }
    Ok(table)
}

/// The budget file; a missing one is the empty configuration (no budgets).
pub fn load_budgets(path: &Path) -> Result<BudgetConfig> {
    let Some(text) = read_if_present(path)? else {
        return Ok(BudgetConfig::default());
    };
    BudgetConfig::parse(&text).map_err(|message| Error::Config {
        path: path.to_path_buf(),
        message,
    })
}

/// The file's text, `None` when it does not exist.
pub(crate) fn read_if_present(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}
