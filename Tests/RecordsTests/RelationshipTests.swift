import Strata
import StrataTesting
import Foundation
import TestBackends
import Testing

// A library: authors and their books (one-to-many; deleting an author deletes its books),
// publishers that refuse to go while they have books, tags on books (many-to-many;
// deleting a tag takes it off its books), and a shelf label per book (one-to-one).

struct Writer: Record, Equatable {
    var id: Int
    var name: String
    static let books = toMany(Volume.self, inverse: \Volume.writerID, deleteRule: .cascade)
    static var relationships: [any RecordRelationship<Writer>] { [books] }
}

struct Press: Record, Equatable {
    var id: String
    var name: String
    static let books = toMany(Volume.self, inverse: \Volume.pressID, deleteRule: .deny)
    static var relationships: [any RecordRelationship<Press>] { [books] }
}

struct Label: Record, Equatable {
    var id: Int
    var word: String
    static let books = toMany(Volume.self, inverse: \Volume.labelIDs)
    static var relationships: [any RecordRelationship<Label>] { [books] }
}

struct Volume: Record, Equatable {
    var id: Int
    var title: String
    var writerID: Int?
    var pressID: String?
    var labelIDs: [Int] = []
    static let writer = toOne(Writer.self, via: \.writerID)
    static let press = toOne(Press.self, via: \.pressID)
    static let labels = toMany(Label.self, via: \.labelIDs)
    static let placard = toOne(Placard.self, inverse: \Placard.volumeID, deleteRule: .cascade)
    static var relationships: [any RecordRelationship<Volume>] { [writer, press, labels, placard] }
    static var indexes: [RecordIndex<Volume>] { [.index(\Volume.title)] }
}

struct Placard: Record, Equatable {
    var id: Int
    var text: String
    var volumeID: Int?
    static let volume = toOne(Volume.self, via: \.volumeID, unique: true)
    static var relationships: [any RecordRelationship<Placard>] { [volume] }
}

/// A type whose relationship has no inverse on the other side.
struct Orphan: Record {
    var id: Int
    var writerID: Int?
    static let writer = toOne(Writer.self, via: \.writerID)
    static var relationships: [any RecordRelationship<Orphan>] { [writer] }
}

@Suite struct RelationshipTests {
    static func seed(_ store: Store) throws {
        try store.write { unit in
            try unit.repository(Writer.self).insert(Writer(id: 1, name: "Le Guin"))
            try unit.repository(Writer.self).insert(Writer(id: 2, name: "Lem"))
            try unit.repository(Press.self).insert(Press(id: "ace", name: "Ace"))
            for (id, word) in [(1, "sf"), (2, "classic"), (3, "short")] { try unit.repository(Label.self).insert(Label(id: id, word: word)) }
            let volumes = unit.repository(Volume.self)
            try volumes.insert(Volume(id: 10, title: "The Dispossessed", writerID: 1, pressID: "ace", labelIDs: [1, 2]))
            try volumes.insert(Volume(id: 11, title: "The Left Hand of Darkness", writerID: 1, pressID: nil, labelIDs: [1]))
            try volumes.insert(Volume(id: 12, title: "Solaris", writerID: 2, pressID: "ace", labelIDs: [2, 3]))
            try volumes.insert(Volume(id: 13, title: "Untitled", writerID: nil))
            try unit.repository(Placard.self).insert(Placard(id: 100, text: "shelf A", volumeID: 10))
        }
    }

    @Test(arguments: Backend.allCases) func relatedRecordsAreReadThroughEitherSide(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try Self.seed(store)
            try store.read { context in
                let volumes = context.repository(Volume.self)
                let dispossessed = try #require(try volumes.get(10))
                #expect(try dispossessed.related(Volume.writer, in: context)?.name == "Le Guin")
                #expect(try dispossessed.related(Volume.press, in: context)?.name == "Ace")
                #expect(try dispossessed.related(Volume.labels, in: context).map(\.word) == ["sf", "classic"])
                #expect(try dispossessed.related(Volume.placard, in: context)?.text == "shelf A")
                #expect(try volumes.get(13)!.related(Volume.writer, in: context) == nil)
                let leGuin = try #require(try context.repository(Writer.self).get(1))
                #expect(try leGuin.related(Writer.books, in: context).map(\.id) == [10, 11])
                #expect(try leGuin.related(Writer.books, in: context, sortBy: [SortDescriptor(\Volume.title, order: .reverse)], limit: 1)
                    .map(\.title) == ["The Left Hand of Darkness"])
                let classic = try #require(try context.repository(Label.self).get(2))
                #expect(try classic.related(Label.books, in: context).map(\.id) == [10, 12])
                // The inverse is an index a query uses too.
                #expect(try volumes.explain(#Predicate { $0.writerID == 1 }).contains("index ref:writerID"))
                #expect(try volumes.fetch(#Predicate { $0.writerID == 2 }).map(\.id) == [12])
                #expect(try volumes.fetch(#Predicate { $0.writerID == nil }).map(\.id) == [13])
                // A page with its related records, and records filtered by them.
                let page = try context.repository(Writer.self).fetch(including: Writer.books)
                #expect(page.map { "\($0.record.name): \($0.related.map(\.id))" } == ["Le Guin: [10, 11]", "Lem: [12]"])
                let withWriters = try volumes.fetch(sortBy: [SortDescriptor(\Volume.title)], including: Volume.writer)
                #expect(withWriters.map { $0.related?.name } == ["Lem", "Le Guin", "Le Guin", nil])
                let byLem = try volumes.fetch(related: Volume.writer, matching: #Predicate<Writer> { $0.name == "Lem" })
                #expect(byLem.map(\.id) == [12])
                let writersOfClassics = try context.repository(Writer.self).fetch(related: Writer.books,
                                                                                  matching: #Predicate<Volume> { $0.title.contains("Solaris") })
                #expect(writersOfClassics.map(\.name) == ["Lem"])
                #expect(try context.repository(Label.self).count(related: Label.books, matching: #Predicate<Volume> { $0.writerID == 1 }) == 2)
                #expect(try volumes.checkIndexes().isEmpty)
            }
            #expect(try store.checkIndexEntries().isEmpty)
        }
    }

    @Test(arguments: Backend.allCases) func aRecordMustNameRecordsThatExist(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try Self.seed(store)
            #expect(throws: RecordError.relatedNotFound(entity: "Volume", id: "20", foreignKey: "Volume.writerID", target: "Writer", targetID: "9")) {
                try store.write { unit in try unit.repository(Volume.self).insert(Volume(id: 20, title: "Ghost", writerID: 9)) }
            }
            #expect(throws: RecordError.self) {
                try store.write { unit in try unit.repository(Volume.self).insert(Volume(id: 20, title: "Ghost", labelIDs: [1, 7])) }
            }
            // Inserted first in the same unit of work, the target may be named.
            try store.write { unit in
                try unit.repository(Writer.self).insert(Writer(id: 9, name: "Tiptree"))
                try unit.repository(Volume.self).insert(Volume(id: 20, title: "Ghost", writerID: 9))
            }
            // Two placards cannot name one volume (one-to-one).
            #expect(throws: RecordError.uniqueViolation(entity: "Placard", index: "ref:volumeID", value: "10")) {
                try store.write { unit in try unit.repository(Placard.self).insert(Placard(id: 101, text: "dup", volumeID: 10)) }
            }
            #expect(throws: RecordError.self) {
                try store.write { unit in try unit.repository(Orphan.self).insert(Orphan(id: 1, writerID: 1)) }
            }
        }
    }

    @Test(arguments: Backend.allCases) func deleteRulesApplyInTheSameCommit(backend: Backend) async throws {
        let store = try await backend.makeStore()
        defer { try? store.close() }
        try Self.seed(store)
        let feed = try store.changes(of: Volume.self, since: store.version)
        // Cascade: the writer's books go, and with them their placards (a cascade on).
        try await store.write { unit in try unit.repository(Writer.self).delete(1) }
        let context = store.makeContext()
        #expect(try context.repository(Volume.self).all().map(\.id) == [12, 13])
        #expect(try context.repository(Placard.self).all().isEmpty)
        #expect(try context.repository(Volume.self).checkIndexes().isEmpty)
        context.discard()
        var changes: [RecordChange<Volume>] = []
        var iterator = feed.makeAsyncIterator()
        while changes.count < 2, let change = try await iterator.next() { changes.append(change) }
        #expect(changes.map(\.kind) == [.deleted, .deleted] && Set(changes.map(\.version)).count == 1, "one commit")
        // Deny: a press with books cannot go; nothing changes.
        let version = store.version
        await #expect(throws: RecordError.deleteDenied(entity: "Press", id: "ace", foreignKey: "Volume.pressID", count: 1)) {
            try await store.write { unit in try unit.repository(Press.self).delete("ace") }
        }
        #expect(store.version == version)
        // Nullify: a label leaves its books' arrays.
        try await store.write { unit in try unit.repository(Label.self).delete(2) }
        #expect(try store.makeContext().repository(Volume.self).get(12)?.labelIDs == [3])
        // Once its books are gone, the press can go.
        try await store.write { unit in
            try unit.repository(Volume.self).delete(12)
            try unit.repository(Press.self).delete("ace")
        }
        #expect(try store.makeContext().repository(Press.self).all().isEmpty)
        #expect(try store.checkIndexEntries().isEmpty)
    }

    /// Concurrent units of work: one deletes a writer (cascading to its books), the other
    /// adds a book by that writer. Whichever commits second conflicts, though the two wrote
    /// no key in common; a retry sees the first's result.
    @Test(arguments: Backend.allCases) func aDeleteAndANewReferrerConflictInEitherOrder(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try Self.seed(store)
            for deleteFirst in [true, false] {
                try store.write { unit in if try unit.repository(Writer.self).get(1) == nil { try unit.repository(Writer.self).insert(Writer(id: 1, name: "Le Guin")) } }
                let deleting = store.makeContext(), adding = store.makeContext()
                try deleting.repository(Writer.self).delete(1)
                try adding.repository(Volume.self).upsert(Volume(id: 30, title: "Lavinia", writerID: 1))
                let (first, second) = deleteFirst ? (deleting, adding) : (adding, deleting)
                try first.commit()
                #expect(throws: ContextError.self, "delete first: \(deleteFirst)") { try second.commit() }
                second.discard()
                try store.read { context in
                    let volumes = try context.repository(Volume.self).all()
                    #expect(volumes.allSatisfy { $0.writerID == nil || (try? context.repository(Writer.self).get($0.writerID!)) != nil })
                }
            }
        }
    }

    /// A child adds a book by a writer its parent deletes meanwhile: under `.error` the
    /// merge fails; under the other policies the parent's delete rule reaches the child's
    /// book too, so no book names a writer that is gone.
    @Test(arguments: [MergePolicy.error, .childWins, .parentWins])
    func aMergeKeepsRelationshipsWhole(policy: MergePolicy) throws {
        let store = try Store.inMemory()
        try Self.seed(store)
        let root = store.makeContext()
        let child = try root.makeChild(mergePolicy: policy)
        try child.repository(Volume.self).insert(Volume(id: 40, title: "The Word for World Is Forest", writerID: 1))
        try root.repository(Writer.self).delete(1)
        if policy == .error {
            #expect(throws: ContextError.self) { try child.commit() }
            child.discard()
        } else {
            try child.commit()
        }
        let volumes = root.repository(Volume.self)
        #expect(try volumes.all().map(\.id) == [12, 13])
        #expect(try volumes.checkIndexes().isEmpty)
        try root.commit()
        #expect(try store.checkIndexEntries().isEmpty)
        // The other way round: the child deletes, the parent adds.
        let parent = store.makeContext()
        let deleting = try parent.makeChild(mergePolicy: policy)
        try deleting.repository(Writer.self).delete(2)
        try parent.repository(Volume.self).insert(Volume(id: 41, title: "Fiasco", writerID: 2))
        if policy == .error {
            #expect(throws: ContextError.self) { try deleting.commit() }
            deleting.discard()
            #expect(try parent.repository(Volume.self).all().map(\.id) == [12, 13, 41])
        } else {
            try deleting.commit()
            #expect(try parent.repository(Volume.self).all().map(\.id) == [13])
            #expect(try parent.repository(Volume.self).checkIndexes().isEmpty)
        }
        parent.discard()
    }

    /// A page prefetched with its related records equals each record's own traversal,
    /// whatever order the page comes in and however far apart its records lie (one walk of
    /// the index for a page in order, another where entries of other records lie between).
    @Test(arguments: [UInt64(7), 8])
    func aPrefetchedPageEqualsEachRecordsOwnTraversal(seed: UInt64) throws {
        print("RelationshipTests prefetch seed \(seed)")
        var random = SplitMix64(seed: seed)
        let store = try Store.inMemory()
        try store.write { unit in
            for id in 0..<200 { try unit.repository(Writer.self).insert(Writer(id: id, name: "w\(id)")) }
            for id in 0..<1_500 {
                let writer = random.next() % 5 == 0 ? nil : Int(random.next() % 200)
                try unit.repository(Volume.self).insert(Volume(id: id, title: "v\(id)", writerID: writer))
            }
        }
        let context = store.makeContext()
        let writers = context.repository(Writer.self)
        let everyOther = #Predicate<Writer> { $0.id % 7 == 0 }
        for (predicate, sort) in [(nil, []), (everyOther, []), (nil, [SortDescriptor(\Writer.id, order: .reverse)]),
                                  (everyOther, [SortDescriptor(\Writer.name)])] as [(Predicate<Writer>?, [SortDescriptor<Writer>])] {
            let page = try writers.fetch(predicate, sortBy: sort, including: Writer.books)
            #expect(!page.isEmpty)
            for (writer, books) in page { #expect(books == (try writer.related(Writer.books, in: context)), "writer \(writer.id)") }
            let expected = try page.map { writer, _ in
                let id: Int? = writer.id
                return try context.repository(Volume.self).fetch(#Predicate<Volume> { $0.writerID == id })
            }
            #expect(page.map(\.related) == expected)
        }
        // Staged changes are seen too.
        try context.repository(Volume.self).upsert(Volume(id: 5_000, title: "new", writerID: 3))
        let three = try writers.fetch(#Predicate { $0.id >= 2 && $0.id < 5 }, including: Writer.books)
        #expect(three[1].related.map(\.id).contains(5_000))
    }

    /// A store that lost a writer behind Strata's back (a blind write beneath contexts):
    /// the checks that know no type and the typed ones both report the book naming it.
    @Test func checksReportAReferenceToARecordThatIsGone() throws {
        let store = try Store.inMemory()
        try Self.seed(store)
        var batch = WALBatch()
        batch.operations = [.delete(key: [0xFE, 0x72, 6] + Array("Writer".utf8) + 2.keyBytes)]
        try store.engine.commit(batch)
        let typeless = try store.checkIndexEntries()
        #expect(typeless.count == 1 && typeless[0].contains("refers to Writer"), "\(typeless)")
        let typed = try store.read { try $0.repository(Volume.self).checkIndexes() }
        #expect(typed == ["Volume 12 refers to Writer 2 through Volume.writerID, which does not exist"])
    }
}
