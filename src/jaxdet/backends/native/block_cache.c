/* A malloc front that keeps freed large blocks mapped for reuse (LD_PRELOAD shim).
 *
 * XLA:CPU allocates each executable's temporary buffer (gigabytes for a detector's train step)
 * afresh at every call and frees it at the end. glibc serves blocks that large with mmap and
 * unmaps them on free, so the kernel faults in and zeroes every page again at the next call:
 * a quarter of a train step's CPU time on a 2-core machine, and much more on virtual machines
 * that hand freed memory back to their host. This shim serves every allocation of at least
 * JAXDET_BLOCK_CACHE_MIN_MB (default 32 MiB, glibc's largest mmap threshold) with its own
 * mapping, and on free keeps up to JAXDET_BLOCK_CACHE_BLOCKS (default 32) such mappings, at most
 * JAXDET_BLOCK_CACHE_MAX_MB in all (default: half of physical memory), for the next request
 * of the same size (rounded up to 2 MiB). Everything else goes to glibc untouched.
 *
 * A request that finds no free block of its size while one of that size is handed out waits up
 * to JAXDET_BLOCK_CACHE_WAIT_MS (default 50) for it to come back before mapping a new one. XLA
 * frees an executable's temporary buffer just after the outputs are ready, so the next call's
 * request often comes first by a fraction of a millisecond; a new mapping there cost a train
 * step a second of kernel time (2.3 GB of fresh pages faulted and zeroed) at a random step of
 * a run. Where two blocks of a size are really needed at once, the wait is paid once, when the
 * second is made.
 *
 * Built and preloaded by jaxdet.cpu_allocator; see there. The fall-through calls glibc's
 * internal entry points (__libc_malloc, ...); calloc is not wrapped (glibc's own is used, and
 * its blocks go back through free to glibc). Only malloc_usable_size looks glibc's up with
 * dlsym, lazily; dlsym's own allocations come back here and go straight to glibc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

#define HUGE_PAGE ((size_t)2 << 20)
#define MAX_BLOCKS 256

typedef struct {
    void *address;
    size_t length;  /* mapped length, a multiple of HUGE_PAGE */
    int cached;     /* 1: free and kept for reuse, 0: handed out */
    unsigned long freed_at;  /* order of freeing, to drop the oldest first */
} block_t;

static block_t blocks[MAX_BLOCKS];
static int block_count;
static unsigned long free_clock;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t returned = PTHREAD_COND_INITIALIZER;  /* a block was given back */
static size_t min_size, max_cached_bytes, cached_bytes;
static int max_cached_blocks, cached_blocks, configured;
static long wait_ms;

static size_t env_size(const char *name, size_t fallback) {
    const char *text = getenv(name);
    if (text == NULL || *text == '\0') return fallback;
    char *end;
    unsigned long long value = strtoull(text, &end, 10);
    return *end == '\0' ? (size_t)value : fallback;
}

/* A fork while another thread holds the lock would leave the child's copy locked forever. */
static void lock_for_fork(void) { pthread_mutex_lock(&lock); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&lock); }

static void configure(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t half = pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 2 : (size_t)4 << 30;
    min_size = env_size("JAXDET_BLOCK_CACHE_MIN_MB", 32) << 20;
    max_cached_bytes = env_size("JAXDET_BLOCK_CACHE_MAX_MB", half >> 20) << 20;
    max_cached_blocks = (int)env_size("JAXDET_BLOCK_CACHE_BLOCKS", 32);
    wait_ms = (long)env_size("JAXDET_BLOCK_CACHE_WAIT_MS", 50);
    configured = 1;
}

/* At load, before any thread exists: read the settings and guard the lock across fork. */
__attribute__((constructor)) static void start(void) {
    if (!configured) configure();
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

/* Drop cached blocks, oldest first, until at most `blocks_kept` blocks and `bytes_kept` bytes
 * remain. Called with the lock held. */
static void trim(int blocks_kept, size_t bytes_kept) {
    while (cached_blocks > blocks_kept || cached_bytes > bytes_kept) {
        int oldest = -1;
        for (int i = 0; i < block_count; i++)
            if (blocks[i].cached && (oldest < 0 || blocks[i].freed_at < blocks[oldest].freed_at))
                oldest = i;
        if (oldest < 0) return;
        munmap(blocks[oldest].address, blocks[oldest].length);
        cached_blocks--;
        cached_bytes -= blocks[oldest].length;
        blocks[oldest] = blocks[--block_count];
    }
}

/* A block of at least `size` bytes, page aligned, or NULL to let glibc serve the request. */
static void *take_block(size_t size) {
    if (!configured) configure();
    if (size < min_size || size > ((size_t)1 << 46)) return NULL;
    size_t length = (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    pthread_mutex_lock(&lock);
    struct timespec deadline = {0, 0};
    for (;;) {
        int in_use = 0;
        for (int i = 0; i < block_count; i++) {
            if (blocks[i].length != length) continue;
            if (!blocks[i].cached) {
                in_use = 1;
                continue;
            }
            blocks[i].cached = 0;
            cached_blocks--;
            cached_bytes -= length;
            pthread_mutex_unlock(&lock);
            return blocks[i].address;
        }
        if (!in_use || wait_ms <= 0) break;
        if (deadline.tv_sec == 0) {
            clock_gettime(CLOCK_REALTIME, &deadline);
            deadline.tv_sec += wait_ms / 1000;
            deadline.tv_nsec += (wait_ms % 1000) * 1000000L;
            if (deadline.tv_nsec >= 1000000000L) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000L;
            }
        }
        if (pthread_cond_timedwait(&returned, &lock, &deadline) != 0) break;  /* timed out */
    }
    if (block_count == MAX_BLOCKS) {
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    void *address = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (address == MAP_FAILED && cached_blocks > 0) {  /* out of memory: the cache goes first */
        trim(0, 0);
        address = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (address == MAP_FAILED) {
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    madvise(address, length, MADV_HUGEPAGE);
    blocks[block_count++] = (block_t){address, length, 0, 0};
    pthread_mutex_unlock(&lock);
    return address;
}

/* The index of the handed-out block starting at `address`, or -1. Called with the lock held. */
static int find_block(const void *address) {
    for (int i = 0; i < block_count; i++)
        if (blocks[i].address == address && !blocks[i].cached) return i;
    return -1;
}

/* Whether `address` was one of ours (then it is now cached or unmapped). */
static int give_back(void *address) {
    if (((uintptr_t)address & 4095) != 0 || block_count == 0) return 0;
    pthread_mutex_lock(&lock);
    int i = find_block(address);
    if (i >= 0) {
        blocks[i].cached = 1;
        blocks[i].freed_at = ++free_clock;
        cached_blocks++;
        cached_bytes += blocks[i].length;
        trim(max_cached_blocks, max_cached_bytes);
        pthread_cond_broadcast(&returned);
    }
    pthread_mutex_unlock(&lock);
    return i >= 0;
}

/* The usable length of our block at `address`, or 0 when it is not ours. */
static size_t block_length(const void *address) {
    if (((uintptr_t)address & 4095) != 0 || block_count == 0) return 0;
    pthread_mutex_lock(&lock);
    int i = find_block(address);
    size_t length = i >= 0 ? blocks[i].length : 0;
    pthread_mutex_unlock(&lock);
    return length;
}

void *malloc(size_t size) {
    void *address = take_block(size);
    return address != NULL ? address : __libc_malloc(size);
}

void free(void *address) {
    if (address != NULL && !give_back(address)) __libc_free(address);
}

void *realloc(void *address, size_t size) {
    size_t length = address != NULL ? block_length(address) : 0;
    if (length == 0) return __libc_realloc(address, size);
    if (size <= length) return address;
    void *moved = malloc(size);
    if (moved == NULL) return NULL;
    memcpy(moved, address, length);
    free(address);
    return moved;
}

static void *aligned(size_t alignment, size_t size) {
    void *address = alignment <= 4096 ? take_block(size) : NULL;
    return address != NULL ? address : __libc_memalign(alignment, size);
}

int posix_memalign(void **result, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    void *address = aligned(alignment, size);
    if (address == NULL) return ENOMEM;
    *result = address;
    return 0;
}

void *aligned_alloc(size_t alignment, size_t size) { return aligned(alignment, size); }

void *memalign(size_t alignment, size_t size) { return aligned(alignment, size); }

size_t malloc_usable_size(void *address) {
    static size_t (*glibc_usable_size)(void *);
    size_t length = address != NULL ? block_length(address) : 0;
    if (length != 0) return length;
    if (glibc_usable_size == NULL)
        glibc_usable_size = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    return glibc_usable_size != NULL ? glibc_usable_size(address) : 0;
}
