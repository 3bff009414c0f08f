// Migrations: named, ordered steps registered in code, each run once, in its own unit of
// work, and recorded in the store in the same commit (FORMAT.md, "Records").
//
// Invariants:
//  Migrator.M1. A step is recorded applied exactly when its changes are committed: the record of
//      it is staged in the step's own unit, so a step that throws (or a crash before its
//      commit) leaves the store as it was, and is run again by the next `migrate`.
//  Migrator.M2. Steps run in registration order; a store that records a step this migrator does
//      not know (written by a newer build) is refused, not migrated.
import StrataContexts
import StrataEngine

/// Named migration steps for a store, run in order, each once.
///
///     var migrator = Migrator()
///     migrator.register("v1: todos") { unit in try unit.repository(Todo.self).insert(…) }
///     migrator.register("v2: reindex todos", Migrator.reindex(Todo.self))
///     migrator.register("v3: due dates", Migrator.migrate(from: TodoV2.self, to: Todo.self) { Todo($0, due: nil) })
///     try migrator.migrate(store)
public struct Migrator: Sendable {
    /// A step: it changes the store through the unit of work it is handed.
    public typealias Step = @Sendable (UnitOfWork) throws -> Void

    private var steps: [(name: String, step: Step)] = []

    public init() {}

    /// Adds a step after those registered so far. Its name is what the store records: keep
    /// it stable once released.
    public mutating func register(_ name: String, _ step: @escaping Step) {
        steps.append((name, step))
    }

    /// The registered steps' names, in order.
    public var names: [String] { steps.map(\.name) }

    /// The names of the steps `store` has applied, in the order they were applied.
    public func applied(in store: Store) throws -> [String] {
        try store.read { context in try Self.applied(in: context) }
    }

    /// The registered steps `store` has not applied yet, in order. Throws
    /// `MigrationError` for an invalid migrator or a store migrated by a newer build.
    public func pending(in store: Store) throws -> [String] {
        try store.read { context in try pending(in: context).map(\.name) }
    }

    /// Runs every pending step, in order, each in its own unit of work committed with the
    /// record of it (Migrator.M1). Returns the names run. A step that throws stops the migration
    /// with its error: the store keeps the steps before it, and not that one.
    @discardableResult
    public func migrate(_ store: Store) throws -> [String] {
        var ran: [String] = []
        for (name, step) in try store.read({ try pending(in: $0) }) {
            try store.write { unit in
                // Another process's migrate may have run it meanwhile: check again inside.
                guard try !Self.applied(in: unit.context).contains(name) else { return }
                try step(unit)
                try Self.record(name, in: unit.context)
            }
            ran.append(name)
        }
        return ran
    }

    /// What running the pending steps would change, without changing anything: they run
    /// in order, each in a child of one context that is discarded at the end.
    public func rehearse(_ store: Store) throws -> [MigrationRehearsal] {
        let root = store.makeContext()
        defer { root.discard() }
        var report: [MigrationRehearsal] = []
        for (name, step) in try pending(in: root) {
            let child = try root.makeChild()
            do { try step(UnitOfWork(context: child)) } catch {
                child.discard()
                throw error
            }
            report.append(MigrationRehearsal(name: name, changedKeys: child.changeCount,
                                             recordsChanged: Self.recordsChanged(in: child)))
            try child.commit()
        }
        return report
    }

    /// A step that rebuilds every index of `type` from its records: for a changed index
    /// declaration (a new key path under an old name, a unique index made plain) whose
    /// entries the manifest would otherwise keep.
    public static func reindex<R: Record>(_ type: R.Type) -> Step {
        reindexStep(type)
    }

    /// A step that rewrites every record stored as `Old` as `New` with `transform`
    /// (`Repository.migrate(from:_:)`): fields gained, lost, renamed or retyped, and
    /// indexes added or dropped on either side.
    public static func migrate<Old: Record, New: Record>(from old: Old.Type, to new: New.Type,
                                                         _ transform: @escaping @Sendable (Old) throws -> New) -> Step {
        { unit in try unit.repository(New.self).migrate(from: Old.self, transform) }
    }

    private static func reindexStep<R: Record>(_ type: R.Type) -> Step {
        { unit in
            let entity = RecordTypeCache.entityName(of: type)
            let context = unit.context
            for (key, _) in try context.scan(prefix: RecordKeys.named(RecordKeys.indexTag, [entity])) {
                try context.stage(key, nil)
            }
            try context.stage(RecordKeys.manifest(entity: entity), nil)
            try Repository<R>(context: context).indexes.ensureBuilt()
        }
    }

    // MARK: Internals

    private func pending(in context: Context) throws -> [(name: String, step: Step)] {
        var seen = Set<String>()
        for (name, _) in steps where !seen.insert(name).inserted {
            throw MigrationError.duplicateStep(name)
        }
        let done = try Self.applied(in: context)
        if let unknown = done.first(where: { !seen.contains($0) }) {
            throw MigrationError.unknownAppliedStep(unknown)
        }
        let doneSet = Set(done)
        return steps.filter { !doneSet.contains($0.name) }
    }

    private static func applied(in context: Context) throws -> [String] {
        try context.scan(prefix: RecordKeys.migrationPrefix).map { _, value in
            try RecordDecoder().decode(MigrationRecord.self, from: value)
        }.sorted { $0.order < $1.order }.map(\.name)
    }

    private static func record(_ name: String, in context: Context) throws {
        let order = try context.scan(prefix: RecordKeys.migrationPrefix).count
        try context.stage(RecordKeys.migration(name), try RecordEncoder().encode(MigrationRecord(name: name, order: order)))
    }

    /// Records changed in `context`'s own overlay, by entity.
    private static func recordsChanged(in context: Context) -> [String: Int] {
        var counts: [String: Int] = [:]
        context.forEachStaged { key, _ in
            guard let prefix = RecordKeys.entityPrefix(of: key, tag: RecordKeys.recordTag) else { return }
            counts[RecordKeys.entityName(ofPrefix: Array(prefix)), default: 0] += 1
        }
        return counts
    }
}

/// What one pending step would change (`Migrator.rehearse`).
public struct MigrationRehearsal: Sendable, Equatable {
    public let name: String
    /// Keys the step would write (records, index entries and others).
    public let changedKeys: Int
    /// Records the step would insert, change or delete, by entity.
    public let recordsChanged: [String: Int]
}

/// A migrator that cannot run as registered, or a store it must not touch.
public enum MigrationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Two steps share a name.
    case duplicateStep(String)
    /// The store records a step this migrator does not register (a newer build migrated it).
    case unknownAppliedStep(String)

    public var description: String {
        switch self {
        case let .duplicateStep(name):
            "Two migration steps are named \"\(name)\"; give each step its own name."
        case let .unknownAppliedStep(name):
            "The store was migrated by step \"\(name)\", which this build does not register: a newer build migrated it. "
                + "Open it with that build, or register the step."
        }
    }
}

/// How an applied step is recorded.
private struct MigrationRecord: Codable {
    let name: String
    let order: Int
}

extension RecordKeys {
    static let migrationTag = UInt8(ascii: "g")
    static var migrationPrefix: [UInt8] { [reservedByte, migrationTag] }
    static func migration(_ name: String) -> [UInt8] { named(migrationTag, [name]) }

}
