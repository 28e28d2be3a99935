package vectorstores

import (
	"context"
	mrand "math/rand/v2"
	"time"
)

// The Service's reads and writes of its Store: the clock, the indexer's
// wake-ups and the sweeper's logging are here, the state is the Store's.

// Codes of a vector store file's last_error (OpenAI's enum).
const (
	codeServer      = "server_error"
	codeUnsupported = "unsupported_file"
	codeInvalid     = "invalid_file"
)

// newFile is a file row about to be attached, in_progress with a fresh
// generation.
func newFile(storeID, owner, fileID, filename string, chunkTokens, overlap int, attrs []byte, now time.Time) FileRow {
	return FileRow{StoreID: storeID, FileID: fileID, Owner: owner, Filename: filename, Gen: mrand.Int64(),
		Status: StatusInProgress, ChunkTokens: chunkTokens, Overlap: overlap, Attributes: attrs, CreatedAt: now}
}

// getStore returns owner's live store id, or a *NotFoundError.
func (s *Service) getStore(ctx context.Context, owner, id string) (StoreRow, error) {
	return s.store.GetStore(ctx, owner, id, s.now())
}

func (s *Service) createStore(ctx context.Context, st StoreRow, fs []FileRow) error {
	return s.store.CreateStore(ctx, st, fs)
}

func (s *Service) modifyStore(ctx context.Context, owner, id string, p StorePatch) (StoreRow, error) {
	return s.store.ModifyStore(ctx, owner, id, s.now(), p)
}

// deleteStore deletes owner's store id, its files and its chunks' data
// keys; the chunks, unreadable from then on, are deleted by the next sweep.
func (s *Service) deleteStore(ctx context.Context, owner, id string) error {
	if err := s.store.DeleteStore(ctx, owner, id, s.now()); err != nil {
		return err
	}
	s.poke()
	return nil
}

func (s *Service) listStores(ctx context.Context, owner string, q ListQuery) ([]StoreRow, bool, error) {
	return s.store.ListStores(ctx, owner, s.now(), q)
}

// attachFiles adds files to owner's store id, skipping those already
// attached, and returns each file's row (the existing one for those).
func (s *Service) attachFiles(ctx context.Context, owner, id string, fs []FileRow) ([]FileRow, error) {
	out, err := s.store.AttachFiles(ctx, owner, id, s.now(), fs)
	if err != nil {
		return nil, err
	}
	s.poke()
	return out, nil
}

// createBatch records batch b of owner's store with its files and wakes
// the indexer.
func (s *Service) createBatch(ctx context.Context, b BatchRow, fs []FileRow) (BatchRow, error) {
	out, err := s.store.CreateBatch(ctx, b, s.now(), fs)
	if err != nil {
		return BatchRow{}, err
	}
	s.poke()
	return out, nil
}

func (s *Service) getBatch(ctx context.Context, owner, id, batchID string) (BatchRow, error) {
	return s.store.GetBatch(ctx, owner, id, batchID, s.now())
}

// cancelBatch cancels the batch's files in progress; their indexers find
// them cancelled at their next write and stop.
func (s *Service) cancelBatch(ctx context.Context, owner, id, batchID string) (BatchRow, error) {
	return s.store.CancelBatch(ctx, owner, id, batchID, s.now())
}

func (s *Service) getFile(ctx context.Context, owner, id, fileID string) (FileRow, error) {
	return s.store.GetFile(ctx, owner, id, fileID, s.now())
}

func (s *Service) setAttributes(ctx context.Context, owner, id, fileID string, attrs []byte) (FileRow, error) {
	return s.store.SetAttributes(ctx, owner, id, fileID, s.now(), attrs)
}

// detachFile removes file fileID from owner's store id; an indexer still
// working on it finds it gone and stops.
func (s *Service) detachFile(ctx context.Context, owner, id, fileID string) error {
	if err := s.store.DetachFile(ctx, owner, id, fileID, s.now()); err != nil {
		return err
	}
	s.poke()
	return nil
}

func (s *Service) listFiles(ctx context.Context, owner, id string, q ListQuery) ([]FileRow, bool, error) {
	return s.store.ListFiles(ctx, owner, id, s.now(), q)
}

// touch records that store id was used now, moving its expiry.
func (s *Service) touch(ctx context.Context, id string) error {
	return s.store.Touch(ctx, id, s.now())
}

// sweep deletes the expired stores and their files, then the chunks no
// attached file owns (detached, deleted stores, lost indexing races).
func (s *Service) sweep(ctx context.Context) {
	stores, err := s.store.SweepStores(ctx, s.now())
	if err != nil && ctx.Err() == nil {
		s.log.Error("vectorstores: sweep expired stores", "err", err)
	}
	chunks, err := s.store.SweepChunks(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Error("vectorstores: sweep detached chunks", "err", err)
	}
	if stores > 0 || chunks > 0 {
		s.log.Info("vectorstores: swept", "expired_stores", stores, "chunks", chunks)
	}
}
