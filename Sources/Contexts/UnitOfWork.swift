// A unit of work: the context a use case makes its changes in, handed to the body of
// `Store.write`. Nested units (`child`) roll back alone; `afterCommit` hooks run only
// once the whole unit is durable.
//
// Invariants:
//  UnitOfWork.U1. A hook registered in a nested unit runs only if that unit merged into its parent
//      and the outermost unit committed durably; never after a rollback or a failed commit.
// Thread-safety: not `Sendable`; it belongs to the body it was handed to.
import StrataEngine

/// The changes of one use case, committed together by `Store.write` or not at all.
public final class UnitOfWork {
    /// The context the unit's reads and writes go to.
    public let context: Context
    private(set) var hooks: [(CommitReceipt) -> Void] = []

    package init(context: Context) {
        self.context = context
    }

    /// The value of `key` as this unit sees it, or nil.
    public func get(_ key: [UInt8]) throws -> [UInt8]? { try context.get(key) }

    /// Whether `key` has a value as this unit sees it.
    public func contains(_ key: [UInt8]) throws -> Bool { try context.contains(key) }

    /// Stages `value` under `key`. Throws when the key or value is over its limit.
    public func put(_ key: [UInt8], _ value: [UInt8]) throws { try context.put(key, value) }

    /// Stages the removal of `key`.
    public func delete(_ key: [UInt8]) throws { try context.delete(key) }

    /// Key/value pairs as this unit sees them; see `Context.scan`.
    public func scan(from start: [UInt8]? = nil, to end: [UInt8]? = nil, prefix: [UInt8] = [],
                     reverse: Bool = false, limit: Int = .max) throws -> [(key: [UInt8], value: [UInt8])] {
        try context.scan(from: start, to: end, prefix: prefix, reverse: reverse, limit: limit)
    }

    /// Runs `body` as a nested unit in a child context. If it throws, only its changes are
    /// rolled back and the error propagates unchanged; if it returns, its changes merge
    /// into this unit (throwing `UnitOfWorkError.mergeFailed` when this unit changed the
    /// same keys meanwhile) and its `afterCommit` hooks join this unit's (UnitOfWork.U1).
    public func child<T>(_ body: (UnitOfWork) throws -> T) throws -> T {
        let nested = try makeNested()
        let result: T
        do { result = try body(nested) } catch { throw nested.rollBack(error) }
        try absorb(nested)
        return result
    }

    /// `child` for async work, run on the caller's actor.
    public func child<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (UnitOfWork) async throws -> T
    ) async throws -> T {
        let nested = try makeNested()
        let result: T
        do { result = try await body(nested) } catch { throw nested.rollBack(error) }
        try absorb(nested)
        return result
    }

    /// `child` from async code with a body that does not suspend (a child's merge does
    /// no I/O, so nothing here blocks).
    public func child<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (UnitOfWork) throws -> T
    ) async throws -> T {
        // Named by type: a plain call here would pick this async overload again.
        let run: ((UnitOfWork) throws -> T) throws -> T = child
        return try run(body)
    }

    /// Runs the hooks of this (outermost) unit after its durable commit.
    func committed(_ receipt: CommitReceipt) {
        for hook in hooks { hook(receipt) }
    }

    /// Runs `hook` with the commit's receipt after the outermost unit committed durably;
    /// never after a rollback or a failed commit (UnitOfWork.U1). Hooks run in the order they were
    /// added, on the caller of `Store.write`, before it returns: update in-process state
    /// here. A crash between the commit and its hooks loses the hooks: an event another
    /// system must receive goes through `publish(_:)` (the records layer's outbox) instead.
    public func afterCommit(_ hook: @escaping (CommitReceipt) -> Void) {
        hooks.append(hook)
    }

    private func makeNested() throws -> UnitOfWork {
        UnitOfWork(context: try context.makeChild(mergePolicy: .error))
    }

    /// Drops this nested unit's changes; returns `error` to rethrow.
    private func rollBack(_ error: any Error) -> any Error {
        context.discard()
        return error
    }

    /// Merges `nested` into this unit and takes over its hooks (UnitOfWork.U1).
    private func absorb(_ nested: UnitOfWork) throws {
        do {
            try nested.context.commit()
        } catch let ContextError.mergeConflict(keys) {
            nested.context.discard()
            throw UnitOfWorkError.mergeFailed(keys: keys)
        }
        hooks += nested.hooks
    }
}
