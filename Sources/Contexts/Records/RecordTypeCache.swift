// Facts about record types that cost reflection to learn (an index's name from its key
// path's description, whether a predicate's key path is the record id), learned once per
// process and kept here.
//
// Thread-safety: behind a pthread lock; values are immutable once stored.
import StrataLocks

enum RecordTypeCache {
    private struct Entries {
        var indexes: [ObjectIdentifier: Any] = [:]
        var entityNames: [ObjectIdentifier: String] = [:]
        var isID: [AnyKeyPath: Bool] = [:]
    }

    private static let entries = Locked(Entries())

    /// `R.indexes`, evaluated once.
    static func indexes<R: Record>(of type: R.Type) -> [RecordIndex<R>] {
        if let cached = entries.withLock({ $0.indexes[ObjectIdentifier(type)] }) as? [RecordIndex<R>] { return cached }
        let indexes = R.indexes
        entries.withLock { $0.indexes[ObjectIdentifier(type)] = indexes }
        return indexes
    }

    /// `R.entityName`, evaluated once (the default describes the type, which is slow).
    static func entityName<R: Record>(of type: R.Type) -> String {
        if let cached = entries.withLock({ $0.entityNames[ObjectIdentifier(type)] }) { return cached }
        let name = R.entityName
        entries.withLock { $0.entityNames[ObjectIdentifier(type)] = name }
        return name
    }

    /// Whether `keyPath` is `R`'s `id`, decided once per key path by `decide`.
    static func isID(_ keyPath: AnyKeyPath, decide: () -> Bool) -> Bool {
        if let cached = entries.withLock({ $0.isID[keyPath] }) { return cached }
        let answer = decide()
        entries.withLock { $0.isID[keyPath] = answer }
        return answer
    }
}
