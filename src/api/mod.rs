//! What every request to the API server gets: a client whose requests carry deadlines and whose
//! silent watches end ([`client`]), and the retry delays of whatever the operator repeats ([`retry`]).

pub mod client;
pub mod retry;
