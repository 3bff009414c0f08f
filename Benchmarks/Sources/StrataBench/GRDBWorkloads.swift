// The record workloads through GRDB (engine `grdb`): the Swift library app developers would
// otherwise pick, on the same SQLite, with the same data, indexes and foreign keys as the
// `sqlite` engine. Records are the same Swift types, made `FetchableRecord &
// PersistableRecord` (their `Codable` conformances name the columns), in a `DatabasePool`
// (WAL, `synchronous=FULL` as the `sqlite` engine sets it); queries are GRDB's query
// interface, relations `hasMany` / `belongsTo` with `including(all:)`. One write
// transaction per batch, one read transaction around a run of queries, as on Strata.
// (This file imports GRDB alone: its `Record` class would clash with Strata's protocol.)
import GRDB
import Foundation

extension Person: FetchableRecord, PersistableRecord {
    static let databaseTableName = "person"
}

extension LibraryAuthor: FetchableRecord, PersistableRecord {
    static let databaseTableName = "author"
    static let grdbBooks = hasMany(LibraryBook.self)
}

extension LibraryBook: FetchableRecord, PersistableRecord {
    static let databaseTableName = "book"
    static let grdbAuthor = belongsTo(LibraryAuthor.self)
}

/// An author and all their books, as `including(all:)` decodes them.
struct AuthorWithBooks: Decodable, FetchableRecord {
    var author: LibraryAuthor
    var books: [LibraryBook]
}

/// GRDB's side of the record workloads.
struct GRDBWorkloads {
    let workload: String
    let directory: String
    let batch: Int
    let seed: UInt64

    func run(count: Int, order: [Int], timed: (() throws -> Void) throws -> Double) throws -> (seconds: Double, queries: Int) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous=FULL") }
        let pool = try DatabasePool(path: directory + "/grdb.db", configuration: configuration)
        if workload == "records-relations" || workload == "records-sort-text" { return try runLibrary(pool, count: count, timed: timed) }
        try pool.write { db in
            try db.create(table: "person") { table in
                table.primaryKey("id", .integer)
                table.column("email", .text).notNull().unique()
                table.column("city", .text).notNull().indexed()
                table.column("age", .integer).notNull().indexed()
            }
        }
        let insert = {
            for start in stride(from: 0, to: count, by: batch) {
                try pool.write { db in for number in order[start..<min(count, start + batch)] { try Person(number).insert(db) } }
            }
        }
        if workload != "records-insert" { try insert() }
        let queries = workload == "records-range" || workload == "records-count" ? max(1, count / 100) : count
        let perCity = count / 1_000
        func read(_ query: Int, _ db: Database) throws {
            switch workload {
            case "records-fetch":
                let number = order[query]
                guard try Person.filter(Column("email") == Person(number).email).fetchOne(db)?.id == number else {
                    throw BenchError(description: "grdb did not find person \(number)")
                }
            case "records-range":
                let from = RecordWorkloads.band(query)
                let people = try Person.filter(Column("age") >= from && Column("age") < from + 5).order(Column("age")).limit(100).fetchAll(db)
                try RecordWorkloads.checkBand(people.map(\.age), from: from, engine: "grdb")
            default:
                let found = try Person.filter(Column("city") == "city\(query % 1_000)").fetchCount(db)
                guard count % 1_000 != 0 || found == perCity else { throw BenchError(description: "grdb counted \(found)") }
            }
        }
        if RecordWorkloads.reads.contains(workload) { try pool.read { try read(0, $0) } }   // the warm-up query
        let seconds = try timed {
            switch workload {
            case "records-insert": try insert()
            case "records-update":
                for start in stride(from: 0, to: count, by: batch) {
                    try pool.write { db in for number in order[start..<min(count, start + batch)] { try Person(number).moved().update(db) } }
                }
            default: try pool.read { db in for query in 0..<queries { try read(query, db) } }
            }
        }
        return (seconds, queries)
    }

    private func runLibrary(_ pool: DatabasePool, count: Int, timed: (() throws -> Void) throws -> Double) throws -> (seconds: Double, queries: Int) {
        let library = Library(books: count, seed: seed)
        try pool.write { db in
            try db.execute(sql: "PRAGMA foreign_keys=ON")
            try db.create(table: "author") { table in
                table.primaryKey("id", .integer)
                table.column("name", .text).notNull()
            }
            try db.create(table: "book") { table in
                table.primaryKey("id", .integer)
                table.column("authorID", .integer).notNull().indexed().references("author", onDelete: .cascade)
                table.column("title", .text).notNull().indexed()
                table.column("year", .integer).notNull()
            }
        }
        for start in stride(from: 0, to: library.authors, by: batch) {
            try pool.write { db in for id in start..<min(library.authors, start + batch) { try library.author(id).insert(db) } }
        }
        for start in stride(from: 0, to: count, by: batch) {
            try pool.write { db in for id in start..<min(count, start + batch) { try library.book(id).insert(db) } }
        }
        let sortedTitles = workload == "records-sort-text" ? (0..<count).map { library.book($0).title }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } : []
        let queries = library.queries(workload)
        func read(_ query: Int, _ db: Database) throws {
            if workload == "records-relations" {
                let page = library.page(query)
                let found = try LibraryAuthor.filter(Column("id") >= page.lowerBound && Column("id") < page.upperBound).order(Column("id"))
                    .including(all: LibraryAuthor.grdbBooks.order(Column("id"))).asRequest(of: AuthorWithBooks.self).fetchAll(db)
                try library.check(page, found.map { ($0.author.id, $0.books.map(\.id)) }, engine: "grdb")
            } else {
                let prefix = library.prefix(query)
                let found = try LibraryBook.filter(Column("title") >= prefix).order(Column("title")).limit(20).fetchAll(db)
                guard found.map(\.title) == library.expectedTitles(from: prefix, among: sortedTitles) else {
                    throw BenchError(description: "grdb answered the titles from \(prefix) wrongly")
                }
            }
        }
        try pool.read { try read(0, $0) }   // the warm-up query
        return (try timed { try pool.read { db in for query in 0..<queries { try read(query, db) } } }, queries)
    }
}
