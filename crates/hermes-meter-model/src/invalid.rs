//! The one error of the model: a user's file whose text is not what it
//! should be.

use std::path::PathBuf;

/// A pricing or budget file that could not be parsed, with the file it
/// came from and what is wrong, in words for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct Invalid {
    pub path: PathBuf,
    pub message: String,
}
