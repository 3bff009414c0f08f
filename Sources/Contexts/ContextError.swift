// The errors of contexts: wrong use of the API, and conflicts. Each description says what
// to do next.
import StrataEngine

/// Errors of `Context` and `Store`.
public enum ContextError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The context was already committed or discarded.
    case finished(ContextStatus)
    /// The context has open children; commit or discard them first.
    case childrenOpen(count: Int)
    /// The context is read-only (`Store.read`).
    case readOnly
    /// A child's commit (or `refresh()`) met keys the parent (or the store) changed after
    /// the fork, under `MergePolicy.error`. Nothing was merged.
    case mergeConflict(keys: [[UInt8]])
    /// Another root commit wrote these keys after this context's snapshot (first committer
    /// wins); nothing was written.
    case conflict(keys: [[UInt8]], readVersion: UInt64)
    /// `refresh()` was called on a child; only a root context moves to a newer version.
    case notRoot
    /// A key starting with `0xFE`: those belong to records and their indexes.
    case reservedKey

    public var description: String {
        switch self {
        case let .finished(status):
            "This context was already \(status); open a new one with store.makeContext() or context.makeChild()."
        case let .childrenOpen(count):
            "This context has \(count) open child context(s); commit or discard them first."
        case .readOnly:
            "This context is read-only (store.read); write in store.write or a context from store.makeContext()."
        case let .mergeConflict(keys):
            "The parent changed \(keys.count) key(s) after this child was opened that the child also wrote "
                + "(first: \(renderKey(keys.first ?? []))); nothing was merged. Discard the child, or commit it "
                + "with mergePolicy .childWins or .parentWins."
        case let .conflict(keys, readVersion):
            "Another commit changed \(keys.count) key(s) after version \(readVersion) that this context also wrote "
                + "(first: \(renderKey(keys.first ?? []))); nothing was written. Redo the work on a fresh context."
        case .notRoot:
            "refresh() moves a root context to the latest version; a child sees its parent as of its fork."
        case .reservedKey:
            "Keys starting with the byte 0xFE belong to records and their indexes; write records through a repository, "
                + "and give plain keys another first byte."
        }
    }
}

/// Where a context is in its life.
public enum ContextStatus: Sendable, Equatable, CustomStringConvertible {
    case open
    case committed
    case discarded

    public var description: String {
        switch self {
        case .open: "open"
        case .committed: "committed"
        case .discarded: "discarded"
        }
    }
}
