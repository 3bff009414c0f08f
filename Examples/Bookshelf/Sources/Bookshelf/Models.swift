// The records of the example: folders, the files in them and the books they belong to
// (relationships: removing a folder removes its files, a book's files go with it), children
// and bananas.
import Strata
import Foundation

public struct Book: Record, Equatable {
    public var id: Int
    public var title: String
    public var author: String

    public static var indexes: [RecordIndex<Book>] { [.index(\Book.author), .index(\Book.title)] }
    /// The files that belong to the book; removing the book removes them.
    public static let files = toMany(BookFile.self, inverse: \BookFile.bookID, deleteRule: .cascade)
    public static var relationships: [any RecordRelationship<Book>] { [files] }

    public init(id: Int, title: String, author: String) {
        self.id = id
        self.title = title
        self.author = author
    }
}

/// A folder of files; removing it removes everything in it.
public struct Folder: Record, Equatable {
    public var id: UUID
    public var name: String

    public static let files = toMany(BookFile.self, inverse: \BookFile.folderID, deleteRule: .cascade)
    public static var relationships: [any RecordRelationship<Folder>] { [files] }

    public init(id: UUID = UUID(), name: String) {
        self.id = id
        self.name = name
    }
}

public struct BookFile: Record, Equatable {
    public var id: UUID
    public var bookID: Int
    public var folderID: Folder.ID?
    public var name: String
    public var byteCount: Int

    public static let book = toOne(Book.self, via: \.bookID)
    public static let folder = toOne(Folder.self, via: \.folderID)
    public static var relationships: [any RecordRelationship<BookFile>] { [book, folder] }

    public init(id: UUID = UUID(), bookID: Int, folderID: Folder.ID? = nil, name: String, byteCount: Int) {
        self.id = id
        self.bookID = bookID
        self.folderID = folderID
        self.name = name
        self.byteCount = byteCount
    }
}

extension BookFile {
    /// The book the file belongs to, as `unit` sees it.
    public func book(in unit: UnitOfWork) throws -> Book? { try related(Self.book, in: unit) }
}

extension Folder {
    /// The files in the folder, by name.
    public func files(in unit: UnitOfWork) throws -> [BookFile] {
        try related(Self.files, in: unit, sortBy: [SortDescriptor(\BookFile.name)])
    }
}

public struct Child: Record, Equatable {
    public var id: String
    public var hunger: Int

    public init(id: String, hunger: Int) {
        self.id = id
        self.hunger = hunger
    }
}

public struct Banana: Record, Equatable {
    public var id: Int
    public var grams: Int

    public init(id: Int, grams: Int) {
        self.id = id
        self.grams = grams
    }
}
