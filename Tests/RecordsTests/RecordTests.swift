import Strata
import StrataTesting
import Foundation
import TestBackends
import Testing

struct Book: Record, Equatable {
    var id: Int
    var title: String
    var author: String
    var year: Int
    var price: Double
    var tags: [String]
    var subtitle: String?
}

/// An older shape of `Book`, stored under the same entity name.
struct BookV1: Record {
    static var entityName: String { "Book" }
    var id: Int
    var title: String
    var author: String
    var year: Int
    var price: Double
    var tags: [String]
}

struct Shelf: Record, Equatable {
    enum Kind: String, Codable { case wood, metal }
    var id: UUID
    var kind: Kind
    var added: Date
    var photo: Data
    var dimensions: [String: Double]
    var levels: [[Int]]
    var owner: Owner?

    struct Owner: Codable, Equatable {
        var name: String
        var age: UInt8
    }
}

func makeBooks(_ count: Int, seed: UInt64) -> [Book] {
    var random = SplitMix64(seed: seed)
    let authors = ["Le Guin", "Borges", "Calvino", "Morrison", "Ishiguro"]
    let words = ["river", "glass", "city", "night", "garden", "map", "salt"]
    return (0..<count).map { index in
        Book(id: index * 3 - 30, title: "\(words[Int(random.next() % 7)]) \(words[Int(random.next() % 7)])",
             author: authors[Int(random.next() % 5)], year: 1950 + Int(random.next() % 70),
             price: Double(random.next() % 4_000) / 100, tags: random.next() % 2 == 0 ? ["classic"] : [],
             subtitle: random.next() % 3 == 0 ? nil : "part \(random.next() % 4)")
    }
}

@Suite struct RecordTests {
    @Test(arguments: Backend.allCases) func crudThroughAUnitOfWork(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let books = makeBooks(5, seed: 1)
            try store.write { unit in
                let repository = unit.repository(Book.self)
                for book in books { try repository.insert(book) }
            }
            let reader = store.makeContext().repository(Book.self)
            #expect(try reader.get(books[2].id) == books[2])
            #expect(try reader.all() == books.sorted { $0.id < $1.id })
            // The body's own error reaches the caller as itself.
            #expect(throws: RecordError.duplicate(entity: "Book", id: "\(books[0].id)")) {
                try store.write { try $0.repository(Book.self).insert(books[0]) }
            }
            var changed = books[1]
            changed.title = "changed"
            try store.write { unit in
                try unit.repository(Book.self).update(changed)
                try unit.repository(Book.self).delete(books[3].id)
            }
            let after = store.makeContext().repository(Book.self)
            #expect(try after.get(changed.id)?.title == "changed")
            #expect(try after.get(books[3].id) == nil)
            #expect(try after.count() == 4)
            #expect(throws: RecordError.notFound(entity: "Book", id: "999")) {
                try store.write { unit in
                    var missing = books[0]
                    missing.id = 999
                    try unit.repository(Book.self).update(missing)
                }
            }
            #expect(throws: RecordError.notFound(entity: "Book", id: "999")) {
                try store.write { try $0.repository(Book.self).delete(999) }
            }
        }
    }

    @Test(arguments: Backend.allCases) func repositoriesSeeOverlaysAndRollbacksLeaveNothing(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let books = makeBooks(4, seed: 2)
            let root = store.makeContext()
            try root.repository(Book.self).insert(books[0])
            let form = try root.makeChild()
            try form.repository(Book.self).insert(books[1])
            #expect(try form.repository(Book.self).count() == 2)
            #expect(try root.repository(Book.self).count() == 1)
            form.discard()
            try root.commit()
            #expect(try store.makeContext().repository(Book.self).all() == [books[0]])
            #expect(throws: CancellationError.self) {
                try store.write { unit in
                    try unit.repository(Book.self).insert(books[2])
                    throw CancellationError()
                }
            }
            #expect(try store.makeContext().repository(Book.self).count() == 1)
        }
    }

    @Test func everyCodableShapeRoundTrips() throws {
        let shelf = Shelf(id: UUID(), kind: .metal, added: Date(timeIntervalSince1970: 1_700_000_000.25),
                          photo: Data([0, 1, 2, 255]), dimensions: ["width": 1.5, "depth": -0.25],
                          levels: [[1, 2], [], [Int.min, Int.max]], owner: .init(name: "Ann ✓", age: 200))
        let bytes = try RecordEncoder().encode(shelf)
        #expect(try RecordDecoder().decode(Shelf.self, from: bytes) == shelf)
        var noOwner = shelf
        noOwner.owner = nil
        #expect(try RecordDecoder().decode(Shelf.self, from: RecordEncoder().encode(noOwner)) == noOwner)
        // RecordValue.R2: decoding and re-encoding gives the same bytes (for a type without a
        // Dictionary, whose iteration order is not stable).
        let book = try RecordEncoder().encode(makeBooks(1, seed: 8)[0])
        #expect(try RecordEncoder().encode(RecordDecoder().decode(Book.self, from: book)) == book)
    }

    @Test(arguments: Backend.allCases) func idsSortByValueIncludingNegativeOnes(backend: Backend) async throws {
        try await backend.withStore { store throws in
            var shuffler = SplitMix64(seed: 4)
            let books = makeBooks(20, seed: 3).shuffled(using: &shuffler)
            try store.write { unit in for book in books { try unit.repository(Book.self).insert(book) } }
            #expect(try store.makeContext().repository(Book.self).all().map(\.id) == books.map(\.id).sorted())
            #expect(Int(keyBytes: (-7).keyBytes) == -7 && UUID(keyBytes: UUID().keyBytes) != nil)
        }
    }

    @Test(arguments: Backend.allCases) func anOlderShapeStillReadsAndMigrationRewritesIt(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try store.write { unit in
                try unit.repository(BookV1.self).insert(BookV1(id: 1, title: "Old", author: "A", year: 1990, price: 1, tags: []))
            }
            // `Book` gained an optional field: old records read with it nil.
            let read = try store.makeContext().repository(Book.self).get(1)
            #expect(read?.title == "Old" && read?.subtitle == nil)
            // A rename: records move to a new entity inside one unit of work.
            struct Volume: Record {
                var id: Int
                var name: String
            }
            let moved = try store.write { unit in
                try unit.repository(Volume.self).migrate(from: BookV1.self) { Volume(id: $0.id, name: $0.title) }
            }
            #expect(moved == 1)
            #expect(try store.makeContext().repository(Volume.self).get(1)?.name == "Old")
            #expect(try store.makeContext().repository(Book.self).count() == 0)
        }
    }

    @Test(arguments: Backend.allCases) func aRecordOfTheWrongShapeIsAClearError(backend: Backend) async throws {
        try await backend.withStore { store throws in
            struct Other: Record {
                static var entityName: String { "Book" }
                var id: Int
                var title: Int
            }
            try store.write { try $0.repository(Other.self).insert(Other(id: 1, title: 5)) }
            #expect {
                _ = try store.makeContext().repository(Book.self).get(1)
            } throws: { error in
                guard case let RecordError.decoding(entity, _, reason) = error else { return false }
                return entity == "Book" && reason.contains("title")
            }
        }
    }

    /// A record that does not decode names its key the same way on every read path: the
    /// point read, a scan, an id range and an index walk read side by side (where the key
    /// is lent from the batch, not copied).
    @Test(arguments: Backend.allCases) func everyReadPathNamesTheKeyOfARecordThatDoesNotDecode(backend: Backend) async throws {
        struct ShelfV0: Record {
            static var entityName: String { "Shelf" }
            var id: Int
            var label: String
            static var indexes: [RecordIndex<ShelfV0>] { [.index(\ShelfV0.label)] }
        }
        struct Shelf: Record {
            var id: Int
            var label: String
            var floor: Int
            static var indexes: [RecordIndex<Shelf>] { [.index(\Shelf.label)] }
        }
        try await backend.withStore { store throws in
            try store.write { unit in
                for id in 1...40 { try unit.repository(ShelfV0.self).insert(ShelfV0(id: id, label: "shelf \(1_000 - id)")) }
            }
            func failedKey(_ read: (Repository<Shelf>) throws -> Void) throws -> String? {
                do {
                    try read(store.makeContext().repository(Shelf.self))
                    return nil
                } catch let RecordError.decoding(entity, key, reason) {
                    #expect(entity == "Shelf" && reason.contains("floor"))
                    return key
                }
            }
            // Labels run backwards against ids: the first by label is id 40.
            let expected = try #require(try failedKey { _ = try $0.get(40) })
            #expect(try failedKey { _ = try $0.fetch(#Predicate<Shelf> { $0.label >= "shelf" }, sortBy: [SortDescriptor(\Shelf.label)], limit: 5) } == expected)
            #expect(try failedKey { _ = try $0.fetch(#Predicate<Shelf> { $0.id >= 40 }) } == expected)
            #expect(try failedKey { _ = try $0.fetch(#Predicate<Shelf> { $0.label == "shelf 960" }) } == expected)
            let first = try #require(try failedKey { _ = try $0.get(1) })
            #expect(try failedKey { _ = try $0.fetch() } == first)
            #expect(first != expected)
        }
    }

    @Test func theDecoderIsTotalOnHostileBytes() throws {
        var random = SplitMix64(seed: 99)
        let valid = try RecordEncoder().encode(makeBooks(1, seed: 5)[0])
        var decoded = 0
        for round in 0..<20_000 {
            var bytes = round % 2 == 0 ? valid : (0..<Int(random.next() % 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if round % 2 == 0, !bytes.isEmpty {
                for _ in 0...(random.next() % 3) { bytes[Int(random.next() % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: random.next() | 1) }
            }
            if (try? RecordDecoder().decode(Book.self, from: bytes)) != nil { decoded += 1 }
        }
        print("hostile record bytes: \(decoded) of 20,000 still decoded as a Book")
        #expect {
            _ = try RecordDecoder().decode(Book.self, from: [1] + [UInt8](repeating: 8, count: 100) + [1])
        } throws: { error in
            guard case RecordError.malformed = error else { return false }
            return true
        }
    }
}

@Suite struct RecordFormatExampleTests {
    struct Note: Record {
        var id: Int
        var text: String
        var pinned: Bool
    }

    /// The worked example of FORMAT.md, "Records", byte for byte.
    @Test(arguments: Backend.allCases) func formatExampleMatches(backend: Backend) async throws {
        let bytes = try RecordEncoder().encode(Note(id: -2, text: "hi", pinned: true))
        #expect(bytes == [0x01, 0x09, 0x03, 0x02, 0x69, 0x64, 0x03, 0x03, 0x04, 0x74, 0x65, 0x78, 0x74, 0x06, 0x02, 0x68, 0x69,
                          0x06, 0x70, 0x69, 0x6E, 0x6E, 0x65, 0x64, 0x02])
        try await backend.withStore { store throws in
            try store.write { try $0.repository(Note.self).insert(Note(id: -2, text: "hi", pinned: true)) }
            let stored = try store.makeContext().scan(prefix: [0xFE])
            #expect(stored.map(\.key) == [[0xFE, 0x72, 0x04, 0x4E, 0x6F, 0x74, 0x65, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE]])
            #expect(stored.map(\.value) == [bytes])
        }
    }
}

@Suite struct RecordFuzzSeedTests {
    /// The fuzz target's seed input is a valid record of its type (so fuzzing starts from
    /// the interesting shapes); this test keeps it so.
    @Test func fuzzSeedDecodes() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/RecordDecoder/seed-record")
        let bytes = try [UInt8](Data(contentsOf: url))
        let value = try RecordDecoder().decode(FuzzTargets.FuzzRecord.self, from: bytes)
        #expect(value.parts.count == 2 && value.blob == Data([1, 2, 3]))
    }
}
