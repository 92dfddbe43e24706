//! Unit tests of the Responses translator.
