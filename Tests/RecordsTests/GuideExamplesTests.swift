import Strata
import Foundation
import Testing

// The examples of the DocC articles (Sources/Strata/Strata.docc: QueryingAndIndexes.md,
// Relationships.md), run as written there, with what the articles say they print or do.

/// The articles' `Book`.
struct GuideBook: Record, Equatable {
    var id: Int
    var title: String
    var author: String
    var year: Int
    var price: Double
    static var indexes: [RecordIndex<GuideBook>] {
        [.index(\GuideBook.author, \GuideBook.year), .index(\GuideBook.title)]
    }
}

/// The shape `GuideBook` had before it gained a price: same entity, one index fewer.
struct GuideBookV2: Record {
    static var entityName: String { "GuideBook" }
    var id: Int
    var title: String
    var author: String
    var year: Int
    static var indexes: [RecordIndex<GuideBookV2>] { [.index(\GuideBookV2.title)] }
}

struct GuideAuthor: Record, Equatable {
    var id: Int
    var name: String
    static let books = toMany(GuideVolume.self, inverse: \GuideVolume.authorID, deleteRule: .cascade)
    static var relationships: [any RecordRelationship<GuideAuthor>] { [books] }
}

struct GuideVolume: Record, Equatable {
    var id: Int
    var authorID: GuideAuthor.ID
    var title: String
    static let author = toOne(GuideAuthor.self, via: \.authorID)
    static var relationships: [any RecordRelationship<GuideVolume>] { [author] }
}

@Suite struct GuideExamplesTests {
    static let books = [
        GuideBook(id: 1, title: "The Dispossessed", author: "Le Guin", year: 1974, price: 12),
        GuideBook(id: 2, title: "A Wizard of Earthsea", author: "Le Guin", year: 1968, price: 9),
        GuideBook(id: 3, title: "The Left Hand of Darkness", author: "Le Guin", year: 1969, price: 11),
        GuideBook(id: 4, title: "Always Coming Home", author: "Le Guin", year: 1985, price: 15),
        GuideBook(id: 5, title: "Kindred", author: "Butler", year: 1979, price: 10),
        GuideBook(id: 6, title: "Parable of the Sower", author: "Butler", year: 1993, price: 13),
        GuideBook(id: 7, title: "Frankenstein", author: "Shelley", year: 1818, price: 5),
    ]

    /// QueryingAndIndexes.md: the plan `explain` prints, sorts read from an index or done in
    /// memory, aggregates and batch changes.
    @Test func theQueryingArticleDoesWhatItSays() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in for book in Self.books { try unit.repository(GuideBook.self).insert(book) } }
        try await store.write { unit in
            let books = unit.repository(GuideBook.self)
            let plan = try books.explain(#Predicate<GuideBook> { $0.author == "Le Guin" && $0.year > 1970 },
                                         sortBy: [SortDescriptor(\GuideBook.year)])
            #expect(plan == "read: index author+year where author == Le Guin and year > 1970; no filter: the read is exact; "
                + "sorted by reading index author+year forwards")
            let firstTen = try books.fetch(#Predicate<GuideBook> { $0.title >= "M" }, sortBy: [SortDescriptor(\GuideBook.title)], limit: 10)
            #expect(firstTen.map(\.id) == [6, 1, 3])
            #expect(try books.explain(#Predicate<GuideBook> { $0.title >= "M" }, sortBy: [SortDescriptor(\GuideBook.title)])
                .contains("sorted by reading index title forwards"))
            #expect(try books.first(sortBy: [SortDescriptor(\GuideBook.price)])?.id == 7)
            #expect(try !books.explain(sortBy: [SortDescriptor(\GuideBook.price)]).contains("sorted by reading"), "no index on price")
            #expect(try books.max(\GuideBook.year, where: #Predicate { $0.author == "Le Guin" }) == 1985)
            let perAuthor = try books.counts(by: \GuideBook.author)
            #expect(perAuthor.map(\.value) == ["Butler", "Le Guin", "Shelley"] && perAuthor.map(\.count) == [2, 4, 1])
            #expect(try books.average(\GuideBook.price) == 75.0 / 7)
            #expect(try books.updateAll(where: #Predicate { $0.author == "Le Guin" }) { $0.price *= 0.9 } == 4)
            #expect(try books.deleteAll(where: #Predicate { $0.year < 1900 }) == 1)
        }
        let books = store.makeContext().repository(GuideBook.self)
        #expect(try books.get(1)?.price == 12 * 0.9 && books.get(5)?.price == 10)
        #expect(try books.get(7) == nil)
    }

    /// QueryingAndIndexes.md, "Changing a type's shape": a required field gained and an
    /// index added, through a migrator step.
    @Test func aRequiredFieldAndAnIndexAreGainedByAMigratorStep() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in
            for book in Self.books { try unit.repository(GuideBookV2.self).insert(GuideBookV2(id: book.id, title: book.title, author: book.author, year: book.year)) }
        }
        var migrator = Migrator()
        migrator.register("3 books gain a price", Migrator.migrate(from: GuideBookV2.self, to: GuideBook.self) { old in
            GuideBook(id: old.id, title: old.title, author: old.author, year: old.year, price: 0)
        })
        #expect(try migrator.migrate(store) == ["3 books gain a price"])
        let books = store.makeContext().repository(GuideBook.self)
        #expect(try books.fetch(#Predicate { $0.author == "Butler" }).map(\.id) == [5, 6])
        #expect(try books.checkIndexes().isEmpty)
        #expect(try books.all().allSatisfy { $0.price == 0 })
    }

    /// Relationships.md: a cascade, a page with its related records, a filter on them, and
    /// a write that names a record that does not exist.
    @Test func theRelationshipsArticleDoesWhatItSays() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in
            for id in 0..<4 { try unit.repository(GuideAuthor.self).insert(GuideAuthor(id: id, name: "author \(id)")) }
            for id in 0..<12 { try unit.repository(GuideVolume.self).insert(GuideVolume(id: id, authorID: id % 4, title: "\(Character(UnicodeScalar(65 + id)!)) book")) }
        }
        try await store.write { unit in
            let authors = unit.repository(GuideAuthor.self)
            let page = try authors.fetch(#Predicate<GuideAuthor> { $0.id < 100 }, including: GuideAuthor.books)
            #expect(page.map(\.record.id) == [0, 1, 2, 3])
            #expect(page.map { $0.related.map(\.id) } == [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]])
            let later = try authors.fetch(related: GuideAuthor.books, matching: #Predicate<GuideVolume> { $0.title >= "L" })
            #expect(later.map(\.id) == [3])   // "L book" is volume 11's
            #expect(try GuideVolume(id: 0, authorID: 0, title: "").related(GuideVolume.author, in: unit)?.name == "author 0")
        }
        try await store.write { unit in try unit.repository(GuideAuthor.self).delete(1) }
        let volumes = store.makeContext().repository(GuideVolume.self)
        #expect(try volumes.count() == 9 && volumes.fetch(#Predicate { $0.authorID == 1 }).isEmpty, "author 1's books went with it")
        await #expect { try await store.write { unit in try unit.repository(GuideVolume.self).insert(GuideVolume(id: 99, authorID: 42, title: "")) } } throws: { error in
            guard case RecordError.relatedNotFound = error else { return false }
            return true
        }
    }
}
