import Strata
import StrataTesting
import Foundation
import TestBackends
import Testing

/// The first shape of a type: its index "tag" is on `label`.
struct Sticker: Record, Equatable {
    var id: Int
    var label: String
    var shade: String

    static var indexes: [RecordIndex<Sticker>] { [.index(\Sticker.label, name: "tag")] }
}

/// A later build of the same entity: the index named "tag" is now on `shade`.
struct StickerV2: Record, Equatable {
    static var entityName: String { "Sticker" }
    var id: Int
    var label: String
    var shade: String

    static var indexes: [RecordIndex<StickerV2>] { [.index(\StickerV2.shade, name: "tag")] }
}

private struct Broken: Error {}

@Suite struct MigratorTests {
    private static func migrator(failing: Bool = false) -> Migrator {
        var migrator = Migrator()
        migrator.register("1 seed stickers") { unit in
            for id in 0..<5 { try unit.repository(Sticker.self).insert(Sticker(id: id, label: "l\(id)", shade: id % 2 == 0 ? "red" : "blue")) }
        }
        migrator.register("2 rename shades") { unit in
            let repository = unit.repository(Sticker.self)
            for var sticker in try repository.all() where sticker.shade == "blue" {
                sticker.shade = "navy"
                try repository.update(sticker)
            }
            if failing { throw Broken() }
        }
        return migrator
    }

    @Test(arguments: Backend.allCases) func pendingStepsRunInOrderOnceEachAndAreRecorded(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let migrator = Self.migrator()
            #expect(try migrator.pending(in: store) == ["1 seed stickers", "2 rename shades"])
            #expect(try migrator.migrate(store) == ["1 seed stickers", "2 rename shades"])
            #expect(try migrator.applied(in: store) == ["1 seed stickers", "2 rename shades"])
            let version = store.version
            #expect(try migrator.migrate(store) == [])
            #expect(store.version == version)
            let shades = try store.read { try $0.repository(Sticker.self).all().map(\.shade) }
            #expect(shades == ["red", "navy", "red", "navy", "red"])
        }
    }

    /// A step that throws leaves the store as it was before that step: the steps before it
    /// stay applied, it is not recorded, and the next migrate runs it again.
    @Test(arguments: Backend.allCases) func aStepThatThrowsLeavesTheStoreAsItWas(backend: Backend) async throws {
        try await backend.withStore { store throws in
            #expect(throws: Broken.self) { try Self.migrator(failing: true).migrate(store) }
            #expect(try Self.migrator().applied(in: store) == ["1 seed stickers"])
            let shades = try store.read { try $0.repository(Sticker.self).all().map(\.shade) }
            #expect(!shades.contains("navy"))
            #expect(try Self.migrator().migrate(store) == ["2 rename shades"])
        }
    }

    /// Rehearsing reports what the pending steps would change and changes nothing.
    @Test(arguments: Backend.allCases) func rehearsingChangesNothing(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let version = store.version
            let report = try Self.migrator().rehearse(store)
            #expect(report.map(\.name) == ["1 seed stickers", "2 rename shades"])
            #expect(report.map { $0.recordsChanged["Sticker"] } == [5, 2])
            #expect(report[0].changedKeys > 5, "records, index entries and the manifest")
            #expect(store.version == version)
            #expect(try store.read { try $0.repository(Sticker.self).all() }.isEmpty)
            #expect(try Self.migrator().pending(in: store).count == 2)
        }
    }

    @Test(arguments: Backend.allCases) func aMigratorThatCannotRunIsRefused(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try Self.migrator().migrate(store)
            var older = Migrator()
            older.register("1 seed stickers") { _ in }
            #expect(throws: MigrationError.unknownAppliedStep("2 rename shades")) { try older.migrate(store) }
            var twice = Migrator()
            twice.register("x") { _ in }
            twice.register("x") { _ in }
            #expect(throws: MigrationError.duplicateStep("x")) { try twice.pending(in: store) }
        }
    }

    /// An index whose declaration changed under the same name keeps its old entries until
    /// `Migrator.reindex` rebuilds it; `checkIndexes` shows the difference.
    @Test(arguments: Backend.allCases) func reindexRebuildsAChangedIndexDeclaration(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try Self.migrator().migrate(store)
            #expect(try store.read { try $0.repository(Sticker.self).checkIndexes() } == [])
            #expect(try !store.read { try $0.repository(StickerV2.self).checkIndexes() }.isEmpty)
            var migrator = Self.migrator()
            migrator.register("3 tag by shade", Migrator.reindex(StickerV2.self))
            #expect(try migrator.migrate(store) == ["3 tag by shade"])
            #expect(try store.read { try $0.repository(StickerV2.self).checkIndexes() } == [])
            let navy = try store.read { try $0.repository(StickerV2.self).fetch(#Predicate<StickerV2> { $0.shade == "navy" }) }
            #expect(navy.map(\.id) == [1, 3])
        }
    }
}
