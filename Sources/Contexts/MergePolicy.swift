// What happens when a context's changes meet changes made after it forked.

/// How a child's commit (or a root's `refresh()`) treats a key that both it and the
/// level beneath it changed after the fork.
public enum MergePolicy: Sendable, Equatable {
    /// Refuse: throw `ContextError.mergeConflict` naming the keys and change nothing.
    case error
    /// The child's (for `refresh()`, the context's own) write is kept.
    case childWins
    /// The parent's (for `refresh()`, the store's) value is kept; the child's write of
    /// that key is dropped.
    case parentWins
}
