//! Helpers shared by the benches: the machine they ran on, and the ratios
//! between contenders measured in one run.

#![allow(dead_code)]

pub mod estimates;
pub mod machine;
pub mod redis;
