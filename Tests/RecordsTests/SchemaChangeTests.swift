import Strata
import StrataTesting
import Foundation
import TestBackends
import Testing

/// Which indexes the two shapes of a migration declare.
enum IndexPlan: String, CaseIterable, Sendable {
    /// Neither shape declares one.
    case none
    /// The old shape indexes the fields the change touches; the new shape declares none.
    case oldField
    /// The old shape declares none; the new shape indexes the changed (or a kept) field.
    case newField
    /// Both shapes declare unique indexes: the old one on the old field, the new one on the new.
    case unique
}

protocol IndexPlanned { static var plan: IndexPlan { get } }
enum NoIndexes: IndexPlanned { static let plan = IndexPlan.none }
enum OldFieldIndexes: IndexPlanned { static let plan = IndexPlan.oldField }
enum NewFieldIndexes: IndexPlanned { static let plan = IndexPlan.newField }
enum UniqueIndexes: IndexPlanned { static let plan = IndexPlan.unique }

/// The first shape of an item.
struct ItemV1<P: IndexPlanned>: Record, Equatable {
    static var entityName: String { "Item" }
    var id: Int
    var name: String
    var size: Int
    var color: String

    static var indexes: [RecordIndex<Self>] {
        switch P.plan {
        case .none, .newField: []
        case .oldField: [.index(\Self.name), .index(\Self.size), .index(\Self.color)]
        case .unique: [.index(\Self.name, unique: true), .index(\Self.size, \Self.color, unique: true)]
        }
    }
}

/// Gained a required field (`priority`, given by the transform).
struct ItemAdded<P: IndexPlanned>: Record, Equatable {
    static var entityName: String { "Item" }
    var id: Int
    var name: String
    var size: Int
    var color: String
    var priority: Int

    static var indexes: [RecordIndex<Self>] {
        switch P.plan {
        case .none, .oldField: []
        case .newField: [.index(\Self.priority)]
        case .unique: [.index(\Self.priority, unique: true)]
        }
    }
}

/// Lost a field (`color`).
struct ItemRemoved<P: IndexPlanned>: Record, Equatable {
    static var entityName: String { "Item" }
    var id: Int
    var name: String
    var size: Int

    static var indexes: [RecordIndex<Self>] {
        switch P.plan {
        case .none, .oldField: []
        case .newField: [.index(\Self.size)]
        case .unique: [.index(\Self.name, unique: true)]
        }
    }
}

/// A field renamed (`name` is now `title`).
struct ItemRenamed<P: IndexPlanned>: Record, Equatable {
    static var entityName: String { "Item" }
    var id: Int
    var title: String
    var size: Int
    var color: String

    static var indexes: [RecordIndex<Self>] {
        switch P.plan {
        case .none, .oldField: []
        case .newField: [.index(\Self.title)]
        case .unique: [.index(\Self.title, unique: true)]
        }
    }
}

/// A field's type changed (`size` is now a `String`).
struct ItemRetyped<P: IndexPlanned>: Record, Equatable {
    static var entityName: String { "Item" }
    var id: Int
    var name: String
    var size: String
    var color: String

    static var indexes: [RecordIndex<Self>] {
        switch P.plan {
        case .none, .oldField: []
        case .newField: [.index(\Self.size)]
        case .unique: [.index(\Self.size, unique: true)]
        }
    }
}

@Suite struct SchemaChangeTests {
    static let count = 40

    static func seed<P: IndexPlanned>(_ store: Store, _: P.Type) throws {
        try store.write { unit in
            for id in 0..<count {
                try unit.repository(ItemV1<P>.self).insert(ItemV1(id: id, name: "item \(id)", size: id % 7 + 10 * id, color: ["red", "blue"][id % 2]))
            }
        }
    }

    /// After a migration: every record reads as the new shape and equals what the
    /// transform made, every index the new shape declares is exact and usable, and no
    /// entry of any other index is left behind.
    static func check<New: Record & Equatable>(_ store: Store, _: New.Type, expected: [New], indexNames: [String],
                                               _ case: String) throws {
        try store.read { context in
            let repository = context.repository(New.self)
            #expect(try repository.all() == expected, "\(`case`)")
            let problems = try repository.checkIndexes()
            #expect(problems.isEmpty, "\(`case`): \(problems)")
            // Every stored index entry belongs to an index the new shape declares.
            let entries = try context.scan(prefix: [0xFE, UInt8(ascii: "i")])
            let names = Set(entries.map { entry in indexNames.first { name in entry.key.starts(with: [0xFE, UInt8(ascii: "i"), 4] + Array("Item".utf8) + [UInt8(name.utf8.count)] + Array(name.utf8)) } ?? "?" })
            #expect(names.isSubset(of: Set(indexNames)), "\(`case`): entries of \(names)")
            #expect(entries.count == expected.count * indexNames.count, "\(`case`): \(entries.count) entries")
        }
        #expect(try store.checkIndexEntries().isEmpty, "\(`case`)")
    }

    static func run<P: IndexPlanned>(_: P.Type, on backend: Backend) async throws {
        let plan = P.plan
        // Field added with a value the transform gives (distinct, so unique indexes hold).
        try await backend.withStore { store in
            try seed(store, P.self)
            let migrated = try store.write { unit in
                try unit.repository(ItemAdded<P>.self).migrate(from: ItemV1<P>.self) { ItemAdded(id: $0.id, name: $0.name, size: $0.size, color: $0.color, priority: 100 - $0.id) }
            }
            #expect(migrated == count)
            try check(store, ItemAdded<P>.self, expected: (0..<count).map { ItemAdded(id: $0, name: "item \($0)", size: $0 % 7 + 10 * $0, color: ["red", "blue"][$0 % 2], priority: 100 - $0) },
                      indexNames: ItemAdded<P>.indexes.map(\.name), "added, \(plan)")
            if plan == .newField || plan == .unique {
                let top = try store.read { try $0.repository(ItemAdded<P>.self).fetch(sortBy: [SortDescriptor(\ItemAdded<P>.priority)], limit: 2) }
                #expect(top.map(\.id) == [39, 38], "added, \(plan): the new index serves the sort")
            }
        }
        // Field removed.
        try await backend.withStore { store in
            try seed(store, P.self)
            try store.write { unit in try unit.repository(ItemRemoved<P>.self).migrate(from: ItemV1<P>.self) { ItemRemoved(id: $0.id, name: $0.name, size: $0.size) } }
            try check(store, ItemRemoved<P>.self, expected: (0..<count).map { ItemRemoved(id: $0, name: "item \($0)", size: $0 % 7 + 10 * $0) },
                      indexNames: ItemRemoved<P>.indexes.map(\.name), "removed, \(plan)")
        }
        // Field renamed.
        try await backend.withStore { store in
            try seed(store, P.self)
            try store.write { unit in try unit.repository(ItemRenamed<P>.self).migrate(from: ItemV1<P>.self) { ItemRenamed(id: $0.id, title: $0.name, size: $0.size, color: $0.color) } }
            try check(store, ItemRenamed<P>.self, expected: (0..<count).map { ItemRenamed(id: $0, title: "item \($0)", size: $0 % 7 + 10 * $0, color: ["red", "blue"][$0 % 2]) },
                      indexNames: ItemRenamed<P>.indexes.map(\.name), "renamed, \(plan)")
            if plan == .newField || plan == .unique {
                let found = try store.read { try $0.repository(ItemRenamed<P>.self).fetch(#Predicate { $0.title == "item 7" }) }
                #expect(found.map(\.id) == [7])
            }
        }
        // Field retyped.
        try await backend.withStore { store in
            try seed(store, P.self)
            try store.write { unit in try unit.repository(ItemRetyped<P>.self).migrate(from: ItemV1<P>.self) { ItemRetyped(id: $0.id, name: $0.name, size: "\($0.size) cm", color: $0.color) } }
            try check(store, ItemRetyped<P>.self, expected: (0..<count).map { ItemRetyped(id: $0, name: "item \($0)", size: "\($0 % 7 + 10 * $0) cm", color: ["red", "blue"][$0 % 2]) },
                      indexNames: ItemRetyped<P>.indexes.map(\.name), "retyped, \(plan)")
        }
    }

    /// {no index, index on an old field, index on the new field, unique index} ×
    /// {field added with a value, field removed, field renamed, type changed}.
    @Test(arguments: Backend.allCases) func everyShapeChangeMigratesWhateverTheIndexes(backend: Backend) async throws {
        try await Self.run(NoIndexes.self, on: backend)
        try await Self.run(OldFieldIndexes.self, on: backend)
        try await Self.run(NewFieldIndexes.self, on: backend)
        try await Self.run(UniqueIndexes.self, on: backend)
    }

    /// A record that does not decode as the old type, and new values that collide in a
    /// unique index, fail the migration with an error naming the record and the field,
    /// and leave the store as it was.
    @Test func failuresNameTheRecordAndTheFieldAndChangeNothing() throws {
        let store = try Store.inMemory()
        try Self.seed(store, UniqueIndexes.self)
        let before = try store.read { try $0.scan() }
        let collision = #expect(throws: RecordError.self) {
            try store.write { unit in
                try unit.repository(ItemAdded<UniqueIndexes>.self).migrate(from: ItemV1<UniqueIndexes>.self) {
                    ItemAdded(id: $0.id, name: $0.name, size: $0.size, color: $0.color, priority: $0.id % 3)
                }
            }
        }
        guard case let .migrationFailed(entity, id, field, _)? = collision else { Issue.record("\(String(describing: collision))"); return }
        #expect(entity == "Item" && id == "3" && field == "priority")
        // A stored record of another shape: the error names it and the field it lacks.
        try store.write { unit in try unit.repository(ItemRemoved<NoIndexes>.self).upsert(ItemRemoved(id: 7, name: "odd", size: 1)) }
        let undecodable = #expect(throws: RecordError.self) {
            try store.write { unit in
                try unit.repository(ItemRenamed<NoIndexes>.self).migrate(from: ItemV1<NoIndexes>.self) { ItemRenamed(id: $0.id, title: $0.name, size: $0.size, color: $0.color) }
            }
        }
        guard case let .migrationFailed(entity, id, field, _)? = undecodable else { Issue.record("\(String(describing: undecodable))"); return }
        #expect(entity == "Item" && id == "7" && field == "color")
        #expect("\(undecodable!)".contains("Item 7") && "\(undecodable!)".contains("color"))
        let after = try store.read { try $0.scan() }
        #expect(after.filter { $0.key.last != 7 }.count == before.filter { $0.key.last != 7 }.count)
    }

    /// A migrator step rewrites the records once, in order with the other steps.
    @Test func aMigratorStepMigratesOnce() throws {
        let store = try Store.inMemory()
        var migrator = Migrator()
        migrator.register("1 seed") { unit in
            for id in 0..<5 { try unit.repository(ItemV1<OldFieldIndexes>.self).insert(ItemV1(id: id, name: "n\(id)", size: id, color: "red")) }
        }
        migrator.register("2 rename", Migrator.migrate(from: ItemV1<OldFieldIndexes>.self, to: ItemRenamed<NewFieldIndexes>.self) {
            ItemRenamed(id: $0.id, title: $0.name.uppercased(), size: $0.size, color: $0.color)
        })
        #expect(try migrator.migrate(store) == ["1 seed", "2 rename"])
        #expect(try migrator.migrate(store) == [])
        let titles = try store.read { try $0.repository(ItemRenamed<NewFieldIndexes>.self).fetch(sortBy: [SortDescriptor(\ItemRenamed<NewFieldIndexes>.title, order: .reverse)]).map(\.title) }
        #expect(titles == ["N4", "N3", "N2", "N1", "N0"])
    }
}
