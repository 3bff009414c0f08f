import Strata
@testable import StrataRecords
import Foundation
import Synchronization
import Testing

/// A book that reads itself (`RecordReadable`), stored under the same entity as `Book`,
/// counting its reads so that a test can tell the repository went through `init(record:)`.
struct ReadingBook: RecordReadable, Equatable {
    static let entityName = "Book"
    static let reads = Atomic(0)
    static var indexes: [RecordIndex<ReadingBook>] { [.index(\ReadingBook.year)] }

    var id: Int
    var title: String
    var author: String
    var year: Int
    var price: Double
    var tags: [String]
    var subtitle: String?

    init(_ book: Book) {
        (id, title, author, year, price, tags, subtitle) = (book.id, book.title, book.author, book.year, book.price, book.tags, book.subtitle)
    }

    init(record: borrowing RecordReader) throws {
        Self.reads.add(1, ordering: .relaxed)
        id = try record.decode(Int.self, forKey: "id")
        title = try record.decode(String.self, forKey: "title")
        author = try record.decode(String.self, forKey: "author")
        year = try record.decode(Int.self, forKey: "year")
        price = try record.decode(Double.self, forKey: "price")
        tags = try record.decode([String].self, forKey: "tags")
        subtitle = try record.decodeIfPresent(String.self, forKey: "subtitle")
    }
}

@Suite(.serialized) struct RecordReaderTests {
    /// `init(record:)` reads what `init(from:)` reads from the same bytes: every field
    /// kind, an optional present, nil and missing.
    @Test func readsWhatCodableReads() throws {
        print("RecordReaderTests seed 5")
        for book in makeBooks(40, seed: 5) {
            let bytes = try RecordEncoder().encode(book)
            let read = try RecordDecoder().decode(ReadingBook.self, from: bytes, reading: RecordDecoder.reading(ReadingBook.self))
            #expect(read == ReadingBook(try RecordDecoder().decode(Book.self, from: bytes)))
        }
        // A record written without `subtitle` reads it as nil.
        struct NoSubtitle: Codable { var id = 1, title = "t", author = "a", year = 2000, price = 1.5, tags = ["x"] }
        let withoutSubtitle = try RecordDecoder().decode(ReadingBook.self, from: try RecordEncoder().encode(NoSubtitle()),
                                                         reading: RecordDecoder.reading(ReadingBook.self))
        #expect(withoutSubtitle.subtitle == nil && withoutSubtitle.tags == ["x"])
    }

    /// A missing field and a value of another shape throw the errors `init(from:)` would,
    /// naming the field.
    @Test func errorsNameTheField() throws {
        struct Missing: Codable { var id = 1, title = "t" }
        do {
            _ = try RecordDecoder().decode(ReadingBook.self, from: try RecordEncoder().encode(Missing()), reading: RecordDecoder.reading(ReadingBook.self))
            Issue.record("a record without `author` was read")
        } catch let DecodingError.keyNotFound(key, _) {
            #expect(key.stringValue == "author")
        }
        struct WrongYear: Codable { var id = 1, title = "t", author = "a", year = "1999" }
        do {
            _ = try RecordDecoder().decode(ReadingBook.self, from: try RecordEncoder().encode(WrongYear()), reading: RecordDecoder.reading(ReadingBook.self))
            Issue.record("a string was read as an integer")
        } catch let DecodingError.typeMismatch(_, context) {
            #expect(context.codingPath.map(\.stringValue) == ["year"])
        }
        // Bad bytes are still `RecordError.malformed`: a count past the bytes, and bytes
        // after a whole record.
        let reading = RecordDecoder.reading(ReadingBook.self)
        #expect(throws: RecordError.self) {
            _ = try RecordDecoder().decode(ReadingBook.self, from: [1, 9, 5, 200], reading: reading)
        }
        let whole = try RecordEncoder().encode(makeBooks(1, seed: 5)[0])
        #expect(throws: RecordError.malformed(offset: whole.count, reason: "bytes after the record")) {
            _ = try RecordDecoder().decode(ReadingBook.self, from: whole + [0], reading: reading)
        }
        // Every cut of a whole record is malformed, never a trap or a read past it.
        for cut in 0..<whole.count {
            #expect(throws: RecordError.self, "cut at \(cut)") {
                _ = try RecordDecoder().decode(ReadingBook.self, from: Array(whole[..<cut]), reading: reading)
            }
        }
        // A string's bytes that are not UTF-8 name its tag; a length past the bytes names
        // the length.
        struct Titled: Codable { var id = 1, title = "qq", author = "a", year = 1999 }
        let titled = try RecordEncoder().encode(Titled())
        let title = try #require(titled.indices.first { titled[$0...].starts(with: Array("qq".utf8)) })
        var notUTF8 = titled
        notUTF8[title] = 0xFF
        #expect(throws: RecordError.malformed(offset: title - 2, reason: "a string that is not UTF-8")) {
            _ = try RecordDecoder().decode(ReadingBook.self, from: notUTF8, reading: reading)
        }
        var tooLong = titled
        tooLong[title - 1] = 0x7F
        do {
            _ = try RecordDecoder().decode(ReadingBook.self, from: tooLong, reading: reading)
            Issue.record("a string longer than its record was read")
        } catch let RecordError.malformed(offset, _) {
            #expect(offset == title - 1)
        }
        // A record that is not a keyed value is a type mismatch, as for `init(from:)`.
        do {
            _ = try RecordDecoder().decode(ReadingBook.self, from: try RecordEncoder().encode([1, 2]), reading: reading)
            Issue.record("an array was read as a record")
        } catch DecodingError.typeMismatch {}
    }

    /// A repository of a `RecordReadable` type reads through `init(record:)`: gets,
    /// fetches through an index and a scan, and an update's read of the old record.
    @Test func repositoriesReadThroughInitRecord() throws {
        #expect(RecordDecoder.reading(Book.self) == nil)
        let store = try Store.inMemory()
        let books = makeBooks(30, seed: 6).map(ReadingBook.init)
        try store.write { unit in
            for book in books { try unit.repository(ReadingBook.self).insert(book) }
        }
        let repository = store.makeContext().repository(ReadingBook.self)
        let before = ReadingBook.reads.load(ordering: .relaxed)
        #expect(try repository.get(books[3].id) == books[3])
        let year = books[7].year
        let fetched = try repository.fetch(#Predicate<ReadingBook> { $0.year >= year }, sortBy: [SortDescriptor(\ReadingBook.year)])
        #expect(fetched.map(\.id) == books.filter { $0.year >= year }.sorted { ($0.year, $0.id) < ($1.year, $1.id) }.map(\.id))
        #expect(ReadingBook.reads.load(ordering: .relaxed) - before == 1 + fetched.count)
        var changed = books[4]
        changed.year += 1
        try store.write { try $0.repository(ReadingBook.self).update(changed) }
        #expect(ReadingBook.reads.load(ordering: .relaxed) - before == 2 + fetched.count)
        // The same records read as `Book` through `init(from:)`.
        #expect(try store.makeContext().repository(Book.self).get(changed.id).map(ReadingBook.init) == changed)
    }

    /// A sorted fetch with a limit through an index reads its records in batches: the
    /// first of up to 64, later ones no larger than the candidates still expected (at
    /// least 16, for those a filter passes over). Limits around every batch edge, with
    /// an exact predicate and one a filter finishes, answer as an array does.
    @Test func limitedIndexReadsAcrossBatchesAnswerAsAnArray() throws {
        let store = try Store.inMemory()
        let books = makeBooks(1_000, seed: 8).map(ReadingBook.init)
        try store.write { unit in
            for book in books { try unit.repository(ReadingBook.self).insert(book) }
        }
        let repository = store.makeContext().repository(ReadingBook.self)
        let year = books.map(\.year).sorted()[books.count / 4]
        let exact = #Predicate<ReadingBook> { $0.year >= year }
        let filtered = #Predicate<ReadingBook> { $0.year >= year && $0.price > 20 }
        let byYear = [SortDescriptor(\ReadingBook.year)]
        for (name, predicate) in [("exact", exact), ("filtered", filtered)] {
            let all = try books.filter { try predicate.evaluate($0) }.sorted { ($0.year, $0.id) < ($1.year, $1.id) }
            #expect(all.count > 300, "\(name): \(all.count) matches")
            for limit in [1, 15, 16, 17, 63, 64, 65, 80, 100, 128, 129, 300, all.count + 1] {
                let fetched = try repository.fetch(predicate, sortBy: byYear, limit: limit)
                #expect(fetched.map(\.id) == all.prefix(limit).map(\.id), "\(name), limit \(limit)")
            }
        }
    }

    /// A reader reads a record where its bytes lie: in the memtable, in a page of the tree
    /// after a checkpoint, in overflow pages (a record larger than a page), and in what a
    /// context staged over them; through a get, an index walk and a scan alike.
    @Test func readsRecordsWhereverTheyLie() throws {
        print("RecordReaderTests seed 8")
        let store = try Store.inMemory()
        var books = makeBooks(60, seed: 8).map(ReadingBook.init)
        books[5].title = String(repeating: "long title ", count: 500)   // past a page
        func check(_ context: Context, _ expected: [ReadingBook], _ stage: String) throws {
            let repository = context.repository(ReadingBook.self)
            for book in expected { #expect(try repository.get(book.id) == book, "\(stage)") }
            let byYear = try repository.fetch(#Predicate<ReadingBook> { $0.year >= 0 }, sortBy: [SortDescriptor(\ReadingBook.year)])
            #expect(byYear == expected.sorted { ($0.year, $0.id) < ($1.year, $1.id) }, "\(stage)")
            #expect(try repository.fetch() == expected.sorted { $0.id < $1.id }, "\(stage)")
        }
        try store.write { unit in
            for book in books[..<30] { try unit.repository(ReadingBook.self).insert(book) }
        }
        try store.engine.checkpoint()
        try store.write { unit in
            for book in books[30...] { try unit.repository(ReadingBook.self).insert(book) }
        }
        try check(store.makeContext(), books, "tree and memtable")
        // Staged over them: one changed, one added, one removed.
        let context = store.makeContext()
        var staged = books
        staged[2].title = "staged"
        try context.repository(ReadingBook.self).update(staged[2])
        try context.repository(ReadingBook.self).delete(staged[9].id)
        staged.remove(at: 9)
        try check(context, staged, "staged")
    }
}
