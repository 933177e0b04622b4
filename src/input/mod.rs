//! The raw Events in: one list and watch of every core/v1 Event ([`watch`]), its pages read one
//! object at a time ([`list_body`]) and sized by bytes ([`paging`]), each change read as an
//! observation for the engine ([`feed`]), how far that input is known to be complete
//! ([`completeness`]), the rebuild of the engine at start from the stored series objects and the
//! first list ([`restart`]), and, on a standby, the leader's writes ([`own_watch`]) and lists
//! that go gently ([`pace`]).

pub mod completeness;
pub mod feed;
pub mod list_body;
pub mod own_watch;
pub mod pace;
pub mod paging;
pub mod restart;
pub mod watch;
