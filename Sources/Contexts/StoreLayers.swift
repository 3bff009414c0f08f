// The seam between contexts and the layers above them (the records layer): per-store state
// a layer keeps, and the hook it registers to settle what a merge or refresh settled key by
// key. Contexts know no layer; a layer attaches itself to each store it is used with.
//
// Thread-safety: the table is behind a `Mutex`; what is attached is `Sendable`.
import Synchronization

/// A layer above contexts that must act after a child's merge or a root's `refresh()`
/// settled conflicting keys one by one under a merge policy, or met keys the other side
/// wrote in ranges this side read (Context.C4): the records layer repairs the
/// index entries of the records behind those keys, and keeps relationships whole, in the
/// same context.
package protocol ContextSettling: AnyObject, Sendable {
    /// Called on `context` (the parent of a merge, or the refreshed root) after its staged
    /// writes took the merge's result. `conflicts` are keys both sides wrote (settled by
    /// `policy`), `readConflicts` keys the other side wrote in a range this side read.
    /// `sides` read a key as each side of the merge saw it (this context before, the other
    /// side, and what both started from). Throwing undoes the merge or refresh and reaches
    /// its caller (`ContextError.mergeConflict` where `policy` is `.error` and keeping the
    /// layer's rules would need a side chosen).
    func settle(_ context: Context, conflicts: [[UInt8]], readConflicts: [[UInt8]], policy: MergePolicy,
                sides: [([UInt8]) throws -> [UInt8]?]) throws
}

/// The state that layers above contexts keep for one store, one object per layer type.
package final class StoreLayers: Sendable {
    private struct Attached {
        var byType: [ObjectIdentifier: any AnyObject & Sendable] = [:]
        var settling: [any ContextSettling] = []
    }

    private let attached = Mutex(Attached())

    init() {}

    /// The object of type `T` attached to this store, made by `make` the first time it is
    /// asked for (and registered to settle merges when it is `ContextSettling`).
    package func attached<T: AnyObject & Sendable>(_ type: T.Type, _ make: () -> T) -> T {
        attached.withLock { attached in
            if let found = attached.byType[ObjectIdentifier(type)] { return unsafeDowncast(found, to: T.self) }
            let made = make()
            attached.byType[ObjectIdentifier(type)] = made
            if let settling = made as? any ContextSettling { attached.settling.append(settling) }
            return made
        }
    }

    /// Runs every attached layer's `settle` (in the order they attached).
    func settle(_ context: Context, conflicts: [[UInt8]], readConflicts: [[UInt8]], policy: MergePolicy,
                sides: [([UInt8]) throws -> [UInt8]?]) throws {
        let settling = attached.withLock { $0.settling }
        for layer in settling {
            try layer.settle(context, conflicts: conflicts, readConflicts: readConflicts, policy: policy, sides: sides)
        }
    }
}
