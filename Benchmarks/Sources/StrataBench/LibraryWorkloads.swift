// The library workloads: N books by N / 10 authors, each book naming its author (a
// relationship, cascade on delete) and indexed by title. On Strata, `LibraryAuthor.books`
// is the inverse of `LibraryBook.author`, kept through the foreign key's index; on SQLite,
// `book(author_id REFERENCES author(id) ON DELETE CASCADE)` with foreign keys on, an index
// on `author_id` and one on `title`; on GRDB (GRDBWorkloads.swift), the same schema with
// `hasMany` / `belongsTo` associations. Both sides build app values from what they read.
//  - records-relations: N / 100 queries, each a page of 100 authors (by id) with all their
//    books, prefetched: Strata's `fetch(_:including:)`, SQLite's and GRDB's two queries
//    (the authors, then the books `WHERE author_id IN (…)`, grouped by author);
//  - records-sort-text: N / 10 queries of the first 20 books by title from a title
//    prefix on (`title >= p` sorted by title, limit 20), read from the title index.
// Every answer is checked. Expectation: index reads and record decoding, CPU-bound.
import Strata
import StrataTesting
import CSQLite
import Foundation

struct LibraryAuthor: Record, Equatable {
    var id: Int
    var name: String
    static let books = toMany(LibraryBook.self, inverse: \LibraryBook.authorID, deleteRule: .cascade)
    static var relationships: [any RecordRelationship<LibraryAuthor>] { [books] }
}

struct LibraryBook: Record, Equatable {
    var id: Int
    var authorID: Int
    var title: String
    var year: Int
    static let author = toOne(LibraryAuthor.self, via: \.authorID)
    static var relationships: [any RecordRelationship<LibraryBook>] { [author] }
    static var indexes: [RecordIndex<LibraryBook>] { [.index(\LibraryBook.title)] }
}

extension LibraryAuthor: RecordReadable {
    init(record: borrowing RecordReader) throws {
        id = try record.decode(Int.self, forKey: "id")
        name = try record.decode(String.self, forKey: "name")
    }
}

extension LibraryBook: RecordReadable {
    init(record: borrowing RecordReader) throws {
        id = try record.decode(Int.self, forKey: "id")
        authorID = try record.decode(Int.self, forKey: "authorID")
        title = try record.decode(String.self, forKey: "title")
        year = try record.decode(Int.self, forKey: "year")
    }
}

/// The library's data, the same for every engine: book `n` is by author `n % (N / 10)` and
/// has a title of two words from a seeded vocabulary (a few thousand distinct prefixes).
struct Library {
    let books: Int
    var authors: Int { max(1, books / 10) }
    private let words: [String]

    init(books: Int, seed: UInt64) {
        self.books = books
        var random = SplitMix64(seed: seed)
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        words = (0..<2_000).map { _ in String((0..<(4 + Int(random.next() % 6))).map { _ in letters[Int(random.next() % 26)] }) }
    }

    func author(_ id: Int) -> LibraryAuthor { LibraryAuthor(id: id, name: "author \(id)") }

    func book(_ id: Int) -> LibraryBook {
        LibraryBook(id: id, authorID: id % authors, title: words[(id * 7_919) % words.count] + " " + words[(id * 104_729 + 17) % words.count],
                    year: 1900 + id % 120)
    }

    /// The ids of the books of `author`, ascending.
    func books(of author: Int) -> [Int] { Array(stride(from: author, to: books, by: authors)) }

    /// Query `query` of records-relations: the authors `start ..< start + 100`.
    func page(_ query: Int) -> Range<Int> {
        let pages = max(1, authors / 100)
        let start = (query % pages) * 100
        return start..<min(authors, start + 100)
    }

    /// How many queries `workload` runs.
    func queries(_ workload: String) -> Int { max(1, workload == "records-sort-text" ? books / 10 : books / 100) }

    /// Query `query` of records-sort-text: a two-letter title prefix.
    func prefix(_ query: Int) -> String { String(words[(query * 31) % words.count].prefix(2)) }

    /// The first 20 titles from `prefix` on, by the stated order (UTF-8 bytes).
    func expectedTitles(from prefix: String, among sorted: [String]) -> [String] {
        // The first title at or after the prefix, by binary search.
        var (low, high) = (0, sorted.count)
        while low < high {
            let middle = (low + high) / 2
            if sorted[middle].utf8.lexicographicallyPrecedes(prefix.utf8) { low = middle + 1 } else { high = middle }
        }
        return Array(sorted[low...].prefix(20))
    }

    /// Checks a records-relations answer for authors `page`.
    func check(_ page: Range<Int>, _ answer: [(author: Int, books: [Int])], engine: String) throws {
        guard answer.map(\.author) == Array(page), answer.allSatisfy({ $0.books == books(of: $0.author) }) else {
            throw BenchError(description: "\(engine) answered the authors \(page) wrongly")
        }
    }
}

extension RecordWorkloads {
    /// records-relations and records-sort-text on Strata or SQLite (GRDB: GRDBWorkloads.swift).
    /// With `prepared`, the store is loaded and its queries handed back there instead of
    /// timed (`interleaved`), the store left open for them.
    func runLibrary(directory: String, count: Int, prepared: UnsafeMutablePointer<Queries?>? = nil) throws -> Double {
        let library = Library(books: count, seed: options.seed)
        let queries = library.queries(workload)
        let sortedTitles = workload == "records-sort-text" ? (0..<count).map { library.book($0).title }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } : []
        func checkTitles(_ titles: [String], _ query: Int) throws {
            guard titles == library.expectedTitles(from: library.prefix(query), among: sortedTitles) else {
                throw BenchError(description: "\(engine) answered the titles from \(library.prefix(query)) wrongly")
            }
        }
        if engine == "sqlite" {
            let table = try LibraryTables(directory: directory)
            defer { if prepared?.pointee == nil { table.close() } }
            try table.insert(library, batch: options.batch)
            func read(_ query: Int) throws {
                if workload == "records-relations" {
                    let page = library.page(query)
                    try library.check(page, try table.authorsWithBooks(page).map { ($0.author.id, $0.books.map(\.id)) }, engine: engine)
                } else {
                    try checkTitles(try table.firstTitles(from: library.prefix(query)).map(\.title), query)
                }
            }
            if let prepared {
                prepared.pointee = Queries(count: queries, run: { for query in $0 { try read(query) } }, close: table.close)
                return 0
            }
            try read(0)   // the warm-up query, before the clock
            return try timed { for query in 0..<queries { try read(query) } }
        }
        let store = try Store.open(path: directory, options: Workload.strataOptions(engine: engine))
        defer { if prepared?.pointee == nil { try? store.close() } }
        for start in stride(from: 0, to: library.authors, by: options.batch) {
            try store.write { unit in
                for id in start..<min(library.authors, start + options.batch) { try unit.repository(LibraryAuthor.self).insert(library.author(id)) }
            }
        }
        for start in stride(from: 0, to: count, by: options.batch) {
            try store.write { unit in
                for id in start..<min(count, start + options.batch) { try unit.repository(LibraryBook.self).insert(library.book(id)) }
            }
        }
        func read(_ query: Int, _ context: Context) throws {
            if workload == "records-relations" {
                let page = library.page(query)
                let (lower, upper) = (page.lowerBound, page.upperBound)
                let found = try context.repository(LibraryAuthor.self).fetch(#Predicate<LibraryAuthor> { $0.id >= lower && $0.id < upper },
                                                                             including: LibraryAuthor.books)
                try library.check(page, found.map { ($0.record.id, $0.related.map(\.id)) }, engine: engine)
            } else {
                let prefix = library.prefix(query)
                let found = try context.repository(LibraryBook.self).fetch(#Predicate<LibraryBook> { $0.title >= prefix },
                                                                           sortBy: [SortDescriptor(\LibraryBook.title)], limit: 20)
                try checkTitles(found.map(\.title), query)
            }
        }
        if let prepared {
            prepared.pointee = Queries(count: queries, run: { range in try store.read { context in for query in range { try read(query, context) } } },
                                       close: { try? store.close() })
            return 0
        }
        try store.read { try read(0, $0) }   // the warm-up query, before the clock
        return try timed { try store.read { context in for query in 0..<queries { try read(query, context) } } }
    }
}

/// SQLite's side of the library: authors, and books naming them.
final class LibraryTables {
    private var db: OpaquePointer?
    private var insertAuthor: OpaquePointer?
    private var insertBook: OpaquePointer?
    private var authors: OpaquePointer?
    private var booksOfAuthors: OpaquePointer?
    private var byTitle: OpaquePointer?
    private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    /// How many authors a page has, and so how many `?` the books' `IN` list binds.
    static let pageSize = 100

    init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard sqlite3_open(directory + "/library.db", &db) == SQLITE_OK else { throw BenchError(description: "sqlite3_open failed") }
        for sql in ["PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON",
                    "CREATE TABLE author (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
                    "CREATE TABLE book (id INTEGER PRIMARY KEY, author_id INTEGER NOT NULL REFERENCES author(id) ON DELETE CASCADE, "
                        + "title TEXT NOT NULL, year INTEGER NOT NULL)",
                    "CREATE INDEX book_author ON book (author_id)", "CREATE INDEX book_title ON book (title)"] {
            try exec(sql)
        }
        insertAuthor = try prepare("INSERT INTO author (id, name) VALUES (?, ?)")
        insertBook = try prepare("INSERT INTO book (id, author_id, title, year) VALUES (?, ?, ?, ?)")
        authors = try prepare("SELECT id, name FROM author WHERE id >= ? AND id < ? ORDER BY id")
        let list = Array(repeating: "?", count: Self.pageSize).joined(separator: ", ")
        booksOfAuthors = try prepare("SELECT id, author_id, title, year FROM book WHERE author_id IN (\(list)) ORDER BY author_id, id")
        byTitle = try prepare("SELECT id, author_id, title, year FROM book WHERE title >= ? ORDER BY title LIMIT 20")
    }

    private func exec(_ sql: String) throws { try sqliteExec(db, sql) }

    private func prepare(_ sql: String) throws -> OpaquePointer? { try sqlitePrepare(db, sql) }

    func insert(_ library: Library, batch: Int) throws {
        for start in stride(from: 0, to: library.authors, by: batch) {
            try exec("BEGIN")
            for id in start..<min(library.authors, start + batch) {
                sqlite3_reset(insertAuthor)
                sqlite3_bind_int64(insertAuthor, 1, Int64(id))
                sqlite3_bind_text(insertAuthor, 2, library.author(id).name, -1, transient)
                guard sqlite3_step(insertAuthor) == SQLITE_DONE else { throw BenchError(description: "sqlite insert failed") }
            }
            try exec("COMMIT")
        }
        for start in stride(from: 0, to: library.books, by: batch) {
            try exec("BEGIN")
            for id in start..<min(library.books, start + batch) {
                let book = library.book(id)
                sqlite3_reset(insertBook)
                sqlite3_bind_int64(insertBook, 1, Int64(book.id))
                sqlite3_bind_int64(insertBook, 2, Int64(book.authorID))
                sqlite3_bind_text(insertBook, 3, book.title, -1, transient)
                sqlite3_bind_int64(insertBook, 4, Int64(book.year))
                guard sqlite3_step(insertBook) == SQLITE_DONE else { throw BenchError(description: "sqlite insert failed") }
            }
            try exec("COMMIT")
        }
    }

    /// The authors `page` and all their books, as a prefetch reads them: the authors, then
    /// the books of all of them in one query, grouped by author.
    func authorsWithBooks(_ page: Range<Int>) throws -> [(author: LibraryAuthor, books: [LibraryBook])] {
        sqlite3_reset(authors)
        sqlite3_bind_int64(authors, 1, Int64(page.lowerBound))
        sqlite3_bind_int64(authors, 2, Int64(page.upperBound))
        var found: [(author: LibraryAuthor, books: [LibraryBook])] = []
        var position: [Int: Int] = [:]
        while sqlite3_step(authors) == SQLITE_ROW {
            let author = LibraryAuthor(id: Int(sqlite3_column_int64(authors, 0)), name: String(cString: sqlite3_column_text(authors, 1)))
            position[author.id] = found.count
            found.append((author, []))
        }
        sqlite3_reset(booksOfAuthors)
        for slot in 0..<Self.pageSize {
            // Unused places bind an id no author has.
            let id = slot < found.count ? found[slot].author.id : -1
            sqlite3_bind_int64(booksOfAuthors, Int32(slot + 1), Int64(id))
        }
        while sqlite3_step(booksOfAuthors) == SQLITE_ROW {
            let book = self.book(booksOfAuthors)
            if let at = position[book.authorID] { found[at].books.append(book) }
        }
        return found
    }

    func firstTitles(from prefix: String) throws -> [LibraryBook] {
        sqlite3_reset(byTitle)
        sqlite3_bind_text(byTitle, 1, prefix, -1, transient)
        var books: [LibraryBook] = []
        while sqlite3_step(byTitle) == SQLITE_ROW { books.append(book(byTitle)) }
        return books
    }

    private func book(_ statement: OpaquePointer?) -> LibraryBook {
        LibraryBook(id: Int(sqlite3_column_int64(statement, 0)), authorID: Int(sqlite3_column_int64(statement, 1)),
                    title: String(cString: sqlite3_column_text(statement, 2)), year: Int(sqlite3_column_int64(statement, 3)))
    }

    func close() {
        for statement in [insertAuthor, insertBook, authors, booksOfAuthors, byTitle] { sqlite3_finalize(statement) }
        sqlite3_close(db)
    }
}
