// The records of the example: books and the files attached to them, children and bananas.
import Strata
import Foundation

public struct Book: Record, Equatable {
    public var id: Int
    public var title: String
    public var author: String

    public static var indexes: [RecordIndex<Book>] { [.index(\Book.author)] }

    public init(id: Int, title: String, author: String) {
        self.id = id
        self.title = title
        self.author = author
    }
}

public struct BookFile: Record, Equatable {
    public var id: UUID
    public var bookID: Int
    public var name: String
    public var byteCount: Int

    public static var indexes: [RecordIndex<BookFile>] { [.index(\BookFile.bookID)] }

    public init(id: UUID = UUID(), bookID: Int, name: String, byteCount: Int) {
        self.id = id
        self.bookID = bookID
        self.name = name
        self.byteCount = byteCount
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
