//! `OneOrMore`: a list that holds a single item without allocating, for a
//! throttle's limits and their counts. Most throttled routes have one limit
//! (`throttle:60,1`, the default), and each request would otherwise
//! allocate a vector for its limits and another for their counts.

use std::ops::{Deref, DerefMut};

/// One item in place, or a vector of any length; read and changed as a
/// slice.
#[derive(Debug)]
pub(super) enum OneOrMore<T> {
    /// A single item, without a heap block.
    One([T; 1]),
    /// Any number of items.
    More(Vec<T>),
}

impl<T> OneOrMore<T> {
    /// A list of `item` alone.
    pub(super) fn one(item: T) -> Self {
        Self::One([item])
    }
}

impl<T> From<Vec<T>> for OneOrMore<T> {
    fn from(items: Vec<T>) -> Self {
        Self::More(items)
    }
}

impl<T> Deref for OneOrMore<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Self::One(item) => item,
            Self::More(items) => items,
        }
    }
}

impl<T> DerefMut for OneOrMore<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Self::One(item) => item,
            Self::More(items) => items,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_and_more_read_and_change_as_slices() {
        let mut one = OneOrMore::one(7);
        one[0] += 1;
        assert_eq!(&*one, &[8]);
        let mut more = OneOrMore::from(vec![1, 2, 3]);
        more.iter_mut().for_each(|n| *n *= 10);
        assert_eq!(&*more, &[10, 20, 30]);
        assert!(OneOrMore::<i32>::from(Vec::new()).is_empty());
    }
}
