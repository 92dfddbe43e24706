//! The Anthropic Messages API (`POST /v1/messages`, `POST
//! /v1/messages/count_tokens`) as a dialect of conclave's internal chat
//! form, beside chat and Responses:
//!
//! - `request` reads a Messages body into a chat request (every field
//!   checked, a 400 in Anthropic's shape naming the one that is wrong);
//!   `blocks` maps a turn's content blocks and the tools.
//! - `render` writes a whole chat answer as a `message` object;
//!   `events` ([`Messages`](events::Messages)) is the dialect's `Render`,
//!   streaming Anthropic's events (`ping` as its keep-alive).
//! - `dialect` wires both into the request life cycle.
//!
//! docs/anthropic.md holds the mapping, field by field.

mod blocks;
pub mod dialect;
mod events;
mod render;
mod request;
#[cfg(test)]
mod tests;
