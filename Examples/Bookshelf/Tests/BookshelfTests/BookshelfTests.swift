import Bookshelf
import Strata
import Foundation
import Testing

@Suite struct BookshelfTests {
    static let drafts = Folder(name: "drafts")

    func shelf() throws -> (Store, [BookFile]) {
        let store = try Store.inMemory()
        let files = [BookFile(bookID: 1, folderID: Self.drafts.id, name: "cover.png", byteCount: 300),
                     BookFile(bookID: 1, folderID: Self.drafts.id, name: "notes.txt", byteCount: 20),
                     BookFile(bookID: 2, name: "map.pdf", byteCount: 900)]
        try store.write { unit in
            try unit.repository(Book.self).insert(Book(id: 1, title: "A Wizard of Earthsea", author: "Le Guin"))
            try unit.repository(Book.self).insert(Book(id: 2, title: "Invisible Cities", author: "Calvino"))
            try unit.repository(Folder.self).insert(Self.drafts)
            for file in files { try unit.repository(BookFile.self).insert(file) }
            try unit.repository(Child.self).insert(Child(id: "ann", hunger: 5))
            try unit.repository(Child.self).insert(Child(id: "bob", hunger: 9))
            try unit.repository(Banana.self).insert(Banana(id: 1, grams: 120))
            try unit.repository(Banana.self).insert(Banana(id: 2, grams: 180))
        }
        return (store, files)
    }

    @Test func removingSeveralFilesIsOneTransaction() throws {
        let (store, files) = try shelf()
        let remove = RemoveFiles(store: store)
        #expect(try remove([files[0].id, files[1].id]) == 320)
        let left = store.makeContext().repository(BookFile.self)
        #expect(try left.fetch(#Predicate<BookFile> { $0.bookID == 1 }).isEmpty)
        // One missing id: the use case's own error, and nothing is removed.
        let missing = UUID()
        #expect(throws: BookshelfError.noSuchFile(missing)) { try remove([files[2].id, missing]) }
        #expect(try left.count() == 1)
    }

    @Test func removingAFolderRemovesItsFilesInTheSameCommit() throws {
        let (store, files) = try shelf()
        let version = store.version
        #expect(try RemoveFolder(store: store)(Self.drafts.id) == 320)
        #expect(store.version == version + 1, "one commit")
        let context = store.makeContext()
        #expect(try context.repository(BookFile.self).all().map(\.id) == [files[2].id])
        #expect(try context.repository(Folder.self).all().isEmpty)
        #expect(throws: BookshelfError.noSuchFolder(Self.drafts.id)) { try RemoveFolder(store: store)(Self.drafts.id) }
        // A file names its book, which must exist; the book's files go with it.
        #expect(throws: RecordError.self) {
            try store.write { unit in try unit.repository(BookFile.self).insert(BookFile(bookID: 9, name: "x", byteCount: 1)) }
        }
        try store.write { unit in
            #expect(try unit.repository(BookFile.self).get(files[2].id)?.book(in: unit)?.title == "Invisible Cities")
            try unit.repository(Book.self).delete(2)
        }
        #expect(try store.makeContext().repository(BookFile.self).count() == 0)
    }

    @Test func theHungriestChildGetsTheBiggestBananaAndTheEventFollowsTheCommit() throws {
        let (store, _) = try shelf()
        var events: [ChildWasFed] = []
        let feed = FeedHungriestChild(store: store) { events.append($0) }
        try feed()
        #expect(events == [ChildWasFed(child: "bob", grams: 180, version: store.version)])
        let context = store.makeContext()
        #expect(try context.repository(Child.self).get("bob")?.hunger == 0)
        #expect(try context.repository(Banana.self).all().map(\.id) == [1])
        try feed()
        // Nobody is hungry any more: the use case fails, nothing changes, no event.
        #expect(throws: BookshelfError.nobodyIsHungry) { try feed() }
        #expect(events.count == 2)
        #expect(try store.makeContext().repository(Child.self).get("ann")?.hunger == 0)
    }

    @Test func aCancelledEditLeavesNoTraceAndASavedOneIsDurable() throws {
        let (store, _) = try shelf()
        let cancelled = try EditBookForm(store: store, bookID: 2)
        try cancelled.setTitle("Draft title")
        #expect(try cancelled.book?.title == "Draft title")
        cancelled.cancel()
        #expect(try store.makeContext().repository(Book.self).get(2)?.title == "Invisible Cities")

        let saved = try EditBookForm(store: store, bookID: 2)
        try saved.setTitle("Le città invisibili")
        try saved.save()
        let books = store.makeContext().repository(Book.self)
        #expect(try books.get(2)?.title == "Le città invisibili")
        #expect(try books.fetch(#Predicate<Book> { $0.author == "Calvino" }).count == 1)
    }
}
