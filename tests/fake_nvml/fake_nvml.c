/*
 * A fake libnvidia-ml.so.1: NVIDIA's management library (NVML) serving
 * made-up GPUs, so that code using NVML (pynvml, the agent) runs on machines
 * and in pods that have no GPU.
 *
 * The GPUs come from a JSON layout named by FAKE_NVML_LAYOUT (the format is
 * described in layouts/README.md). nvmlInit reads it; every other call
 * answers from static tables filled by that read, so handles are pointers to
 * static structs that stay valid for the life of the process, as real NVML
 * handles do.
 *
 * Signatures, enum values and struct layouts follow NVIDIA's nvml.h as the
 * pynvml ctypes bindings mirror them; return codes follow NVML's documented
 * behaviour, since callers branch on them (NOT_FOUND for an empty MIG slot,
 * NOT_SUPPORTED for a GPU without MIG or NVLink, ...).
 *
 * Only glibc is needed: the library is mounted into pods whose images hold
 * nothing else of ours, hence the small JSON reader below.
 *
 * FAKE_NVML_LOG, when set, names a file that gets one line per call (the
 * function's name), so a test can prove the calls reached this library.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Built with -fvisibility=hidden: only the NVML API is exported. */
#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* NVML's types and constants, with nvml.h's names and values.              */
/* ------------------------------------------------------------------------ */

typedef enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef enum {
    NVML_FEATURE_DISABLED = 0,
    NVML_FEATURE_ENABLED = 1,
} nvmlEnableState_t;

typedef enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50,
} nvmlGpuTopologyLevel_t;

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_NVLINK_MAX_LINKS 36
#define NVML_DEVICE_MIG_ENABLE 1

/* nvmlPciInfo_t as of NVML 9.0, the struct the _v3 calls fill. */
typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;    /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

/* NVML's versioned structs carry sizeof | version << 24 (0x02000028 here). */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

/* A wrong size here would corrupt the caller's memory: pin the ABI. */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t must match nvml.h");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t must match nvml.h");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t must match nvml.h");

/* ------------------------------------------------------------------------ */
/* The devices.                                                              */
/* ------------------------------------------------------------------------ */

#define MAX_GPUS 32
/* An A100 or H100 splits into at most 7 MIG devices. */
#define MIG_SLOTS 7
#define SWITCH_ID_SIZE 64
#define MAX_LAYOUT_BYTES (1024 * 1024)

struct pci_address {
    unsigned int domain, bus, device, function;
};

struct nvlink {
    bool active;
    struct pci_address remote;
};

/*
 * nvml.h declares nvmlDevice_t as a pointer to the opaque struct nvmlDevice_st;
 * here that struct is the device itself. GPUs and MIG devices share it so
 * that calls valid on both (UUID, name, memory) need no second path.
 */
struct nvmlDevice_st {
    bool is_mig;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned long long memory_total;

    /* GPUs only. */
    unsigned int index;
    struct pci_address pci;
    unsigned int pci_device_id, pci_subsystem_id;
    int numa_node;
    char pcie_switch[SWITCH_ID_SIZE]; /* "" when the GPU shares no switch */
    bool mig_capable;
    unsigned int mig_mode;
    unsigned int mig_count;
    bool has_nvlink;
    struct nvlink links[NVML_NVLINK_MAX_LINKS];

    /* MIG devices only. */
    struct nvmlDevice_st *parent;
    unsigned int gpu_instance_id, compute_instance_id;
};

typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st gpus[MAX_GPUS];
static struct nvmlDevice_st migs[MAX_GPUS][MIG_SLOTS];
static unsigned int gpu_count;
static char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
static int cuda_driver_version;

/*
 * Real NVML counts nvmlInit calls and only tears down on the last
 * nvmlShutdown. The lock serialises init and shutdown; other calls only read
 * the count, which is why it is atomic.
 */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint init_count;

/* The PCI ids of the boards the layouts use, so that tools printing them see
 * real-looking values; other names get 0. */
static const struct {
    const char *name;
    unsigned int device_id;    /* device << 16 | vendor 0x10DE */
    unsigned int subsystem_id;
} known_boards[] = {
    {"NVIDIA A100-SXM4-40GB", 0x20B010DE, 0x134F10DE},
    {"NVIDIA H100 80GB HBM3", 0x233010DE, 0x16C110DE},
    {"Tesla T4", 0x1EB810DE, 0x12A210DE},
};

/* ------------------------------------------------------------------------ */
/* Call log and common checks.                                               */
/* ------------------------------------------------------------------------ */

static void log_call(const char *function)
{
    const char *path = getenv("FAKE_NVML_LOG");
    if (path == NULL || path[0] == '\0')
        return;
    /* Opened per call with O_APPEND so that lines from several processes
     * sharing one log never interleave mid-line. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[128];
    int length = snprintf(line, sizeof line, "%s\n", function);
    if (length > 0 && write(fd, line, (size_t)length) < 0) {
        /* The log is a debugging aid: a failed write must not fail the call. */
    }
    close(fd);
}

static bool initialized(void)
{
    return atomic_load(&init_count) > 0;
}

/* The first lines of every entry point: log, then the checks NVML makes in
 * this order (not initialised before a bad argument). */
static nvmlReturn_t enter(const char *function)
{
    log_call(function);
    return initialized() ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

/* A pointer into one of the static arrays, or NULL for anything else: a
 * stale, foreign or garbage handle must give INVALID_ARGUMENT, not a crash. */
static struct nvmlDevice_st *lookup(nvmlDevice_t handle)
{
    uintptr_t address = (uintptr_t)handle;
    uintptr_t gpu_base = (uintptr_t)gpus;
    uintptr_t mig_base = (uintptr_t)migs;

    if (address >= gpu_base && address < gpu_base + sizeof gpus) {
        uintptr_t offset = address - gpu_base;
        if (offset % sizeof gpus[0] != 0 || offset / sizeof gpus[0] >= gpu_count)
            return NULL;
        return handle;
    }
    if (address >= mig_base && address < mig_base + sizeof migs) {
        uintptr_t offset = address - mig_base;
        if (offset % sizeof migs[0][0] != 0)
            return NULL;
        size_t slot = offset / sizeof migs[0][0];
        size_t gpu = slot / MIG_SLOTS;
        if (gpu >= gpu_count || slot % MIG_SLOTS >= gpus[gpu].mig_count)
            return NULL;
        return handle;
    }
    return NULL;
}

/* enter(), then a valid handle of either kind. */
static nvmlReturn_t enter_device(const char *function, nvmlDevice_t handle, struct nvmlDevice_st **device)
{
    nvmlReturn_t ret = enter(function);
    if (ret != NVML_SUCCESS)
        return ret;
    *device = lookup(handle);
    return *device != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* enter(), then a full GPU: MIG devices have no PCI address, NVLinks or MIG
 * devices of their own, so those calls are not supported on them. */
static nvmlReturn_t enter_gpu(const char *function, nvmlDevice_t handle, struct nvmlDevice_st **gpu)
{
    nvmlReturn_t ret = enter_device(function, handle, gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    return (*gpu)->is_mig ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

static nvmlReturn_t copy_out(char *buffer, unsigned int length, const char *text)
{
    if (buffer == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buffer, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

static void fill_pci_info(nvmlPciInfo_t *info, const struct pci_address *address, unsigned int device_id,
                          unsigned int subsystem_id)
{
    memset(info, 0, sizeof *info);
    info->domain = address->domain;
    info->bus = address->bus;
    info->device = address->device;
    info->pciDeviceId = device_id;
    info->pciSubSystemId = subsystem_id;
    /* NVML prints both forms in upper-case hex, the legacy one with a 16-bit domain. */
    snprintf(info->busIdLegacy, sizeof info->busIdLegacy, "%04X:%02X:%02X.%X", address->domain & 0xFFFFu,
             address->bus & 0xFFu, address->device & 0x1Fu, address->function & 0x7u);
    snprintf(info->busId, sizeof info->busId, "%08X:%02X:%02X.%X", address->domain, address->bus & 0xFFu,
             address->device & 0x1Fu, address->function & 0x7u);
}

/* ------------------------------------------------------------------------ */
/* PCI bus ids and UUIDs as text.                                            */
/* ------------------------------------------------------------------------ */

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads between min_digits and max_digits hex digits at *text. */
static bool read_hex(const char **text, int min_digits, int max_digits, unsigned int *value)
{
    int digits = 0;
    *value = 0;
    while (digits < max_digits && hex_value(**text) >= 0) {
        *value = *value * 16 + (unsigned int)hex_value(**text);
        (*text)++;
        digits++;
    }
    return digits >= min_digits;
}

/*
 * Layouts must give NVML's own form, "DDDDDDDD:BB:DD.F" (strict). Callers of
 * nvmlDeviceGetHandleByPciBusId may, as with real NVML, also use the legacy
 * 4-digit domain, leave the domain or the function out, or use lower case.
 */
static bool parse_bus_id(const char *text, bool strict, struct pci_address *address)
{
    if (strict && (strlen(text) != 16 || text[8] != ':' || text[11] != ':' || text[14] != '.'))
        return false;
    /* [domain:]bus:device, then .function */
    unsigned int fields[3];
    int count = 0;
    for (;;) {
        if (!read_hex(&text, 1, count == 0 ? 8 : 2, &fields[count]))
            return false;
        count++;
        if (count == 3 || *text != ':')
            break;
        text++;
    }
    memset(address, 0, sizeof *address);
    if (count == 3) {
        address->domain = fields[0];
        address->bus = fields[1];
        address->device = fields[2];
    } else if (count == 2) {
        address->bus = fields[0];
        address->device = fields[1];
    } else {
        return false;
    }
    if (*text == '.') {
        text++;
        if (!read_hex(&text, 1, 1, &address->function))
            return false;
    }
    return *text == '\0' && address->bus <= 0xFF && address->device <= 0x1F && address->function <= 7;
}

static bool same_address(const struct pci_address *a, const struct pci_address *b)
{
    return a->domain == b->domain && a->bus == b->bus && a->device == b->device && a->function == b->function;
}

/* prefix + the 8-4-4-4-12 lower-case hex form NVML prints. */
static bool valid_uuid(const char *text, const char *prefix)
{
    size_t prefix_length = strlen(prefix);
    if (strncmp(text, prefix, prefix_length) != 0 || strlen(text) != prefix_length + 36)
        return false;
    text += prefix_length;
    for (int i = 0; i < 36; i++) {
        bool hyphen = i == 8 || i == 13 || i == 18 || i == 23;
        if (hyphen ? text[i] != '-' : !((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f')))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* A small strict JSON reader: objects, arrays, strings with escapes,        */
/* integers, true, false, null. Strings are decoded in place in the file's   */
/* buffer (a decoded string is never longer than its escaped form), so only  */
/* the nodes are allocated.                                                  */
/* ------------------------------------------------------------------------ */

#define JSON_MAX_DEPTH 32

enum json_type { JSON_NULL, JSON_BOOL, JSON_INT, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
    enum json_type type;
    size_t offset;       /* where the value starts in the file, for error messages */
    const char *key;     /* the member's name when the value sits in an object */
    size_t key_offset;   /* and where that name starts */
    long long integer;   /* JSON_INT; JSON_BOOL as 0 or 1 */
    const char *string;  /* JSON_STRING, NUL-terminated */
    struct json *first;  /* JSON_ARRAY and JSON_OBJECT: the first element or member */
    struct json *next;   /* the next element or member of the parent */
};

struct json_parser {
    char *text;
    size_t length;
    size_t pos;
    unsigned int depth;
    size_t error_at;
    char error[128];
};

static const char *json_type_name(enum json_type type)
{
    static const char *const names[] = {"null", "a boolean", "an integer", "a string", "an array", "an object"};
    return names[type];
}

static void json_free(struct json *value)
{
    while (value != NULL) {
        struct json *next = value->next;
        json_free(value->first);
        free(value);
        value = next;
    }
}

__attribute__((format(printf, 3, 4))) static bool json_fail(struct json_parser *p, size_t at, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, args);
    va_end(args);
    p->error_at = at;
    return false;
}

/* The next byte, or -1 at the end of the text. */
static int json_peek(const struct json_parser *p)
{
    return p->pos < p->length ? (unsigned char)p->text[p->pos] : -1;
}

static bool json_is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static void json_skip_space(struct json_parser *p)
{
    int c;
    while ((c = json_peek(p)) == ' ' || c == '\t' || c == '\n' || c == '\r')
        p->pos++;
}

/* Fails with "expected ..." or, at the end of the text, says so. */
static bool json_expected(struct json_parser *p, const char *what)
{
    if (p->pos >= p->length)
        return json_fail(p, p->length, "unexpected end of file, expected %s", what);
    return json_fail(p, p->pos, "expected %s", what);
}

static struct json *json_value(struct json_parser *p);

static bool json_hex4(struct json_parser *p, unsigned int *value)
{
    *value = 0;
    for (int i = 0; i < 4; i++) {
        int digit = p->pos < p->length ? hex_value(p->text[p->pos]) : -1;
        if (digit < 0)
            return json_expected(p, "4 hex digits after \\u");
        *value = *value * 16 + (unsigned int)digit;
        p->pos++;
    }
    return true;
}

static char *utf8_encode(char *out, unsigned int code_point)
{
    if (code_point < 0x80) {
        *out++ = (char)code_point;
    } else if (code_point < 0x800) {
        *out++ = (char)(0xC0 | (code_point >> 6));
        *out++ = (char)(0x80 | (code_point & 0x3F));
    } else if (code_point < 0x10000) {
        *out++ = (char)(0xE0 | (code_point >> 12));
        *out++ = (char)(0x80 | ((code_point >> 6) & 0x3F));
        *out++ = (char)(0x80 | (code_point & 0x3F));
    } else {
        *out++ = (char)(0xF0 | (code_point >> 18));
        *out++ = (char)(0x80 | ((code_point >> 12) & 0x3F));
        *out++ = (char)(0x80 | ((code_point >> 6) & 0x3F));
        *out++ = (char)(0x80 | (code_point & 0x3F));
    }
    return out;
}

/* A \uXXXX escape (the "\u" already read), a surrogate pair taken whole. */
static bool json_unicode_escape(struct json_parser *p, size_t escape_at, char **out)
{
    unsigned int code_point;
    if (!json_hex4(p, &code_point))
        return false;
    if (code_point >= 0xDC00 && code_point <= 0xDFFF)
        return json_fail(p, escape_at, "lone low surrogate in \\u escape");
    if (code_point >= 0xD800 && code_point <= 0xDBFF) {
        unsigned int low;
        if (p->pos + 2 > p->length || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u')
            return json_fail(p, escape_at, "high surrogate not followed by a \\u low surrogate");
        p->pos += 2;
        if (!json_hex4(p, &low))
            return false;
        if (low < 0xDC00 || low > 0xDFFF)
            return json_fail(p, escape_at, "high surrogate not followed by a \\u low surrogate");
        code_point = 0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00);
    }
    if (code_point == 0)
        return json_fail(p, escape_at, "\\u0000 is not allowed in a string");
    *out = utf8_encode(*out, code_point);
    return true;
}

static bool json_string(struct json_parser *p, const char **value)
{
    size_t start = p->pos;
    char *out = p->text + start; /* decoded bytes trail the bytes read */
    *value = out;
    p->pos++;                    /* the opening quote */
    for (;;) {
        int c = json_peek(p);
        if (c < 0)
            return json_fail(p, start, "unterminated string");
        if (c == '"')
            break;
        if (c < 0x20)
            return json_fail(p, p->pos, "control character in a string (escape it)");
        p->pos++;
        if (c != '\\') {
            *out++ = (char)c;
            continue;
        }
        size_t escape_at = p->pos - 1;
        int escape = json_peek(p);
        p->pos++;
        switch (escape) {
        case '"':
        case '\\':
        case '/':
            *out++ = (char)escape;
            break;
        case 'b':
            *out++ = '\b';
            break;
        case 'f':
            *out++ = '\f';
            break;
        case 'n':
            *out++ = '\n';
            break;
        case 'r':
            *out++ = '\r';
            break;
        case 't':
            *out++ = '\t';
            break;
        case 'u':
            if (!json_unicode_escape(p, escape_at, &out))
                return false;
            break;
        default:
            if (escape < 0)
                return json_fail(p, start, "unterminated string");
            return json_fail(p, escape_at, "invalid escape in a string");
        }
    }
    *out = '\0'; /* at or before the closing quote, which has been read */
    p->pos++;
    return true;
}

static bool json_integer(struct json_parser *p, struct json *value)
{
    bool negative = json_peek(p) == '-';
    unsigned long long magnitude = 0;
    value->type = JSON_INT;
    if (negative)
        p->pos++;
    if (!json_is_digit(json_peek(p)))
        return json_expected(p, "a digit");
    if (json_peek(p) == '0' && p->pos + 1 < p->length && json_is_digit(p->text[p->pos + 1]))
        return json_fail(p, p->pos, "leading zeros are not allowed");
    while (json_is_digit(json_peek(p))) {
        unsigned int digit = (unsigned int)(json_peek(p) - '0');
        if (magnitude > (unsigned long long)(LLONG_MAX - digit) / 10)
            return json_fail(p, value->offset, "integer out of range");
        magnitude = magnitude * 10 + digit;
        p->pos++;
    }
    int c = json_peek(p);
    if (c == '.' || c == 'e' || c == 'E')
        return json_fail(p, value->offset, "only integers are supported (no fractions or exponents)");
    value->integer = negative ? -(long long)magnitude : (long long)magnitude;
    return true;
}

static bool json_literal(struct json_parser *p, struct json *value)
{
    static const struct {
        const char *text;
        enum json_type type;
        long long integer;
    } literals[] = {{"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (size_t i = 0; i < sizeof literals / sizeof literals[0]; i++) {
        size_t length = strlen(literals[i].text);
        if (p->length - p->pos >= length && memcmp(p->text + p->pos, literals[i].text, length) == 0) {
            value->type = literals[i].type;
            value->integer = literals[i].integer;
            p->pos += length;
            return true;
        }
    }
    return json_expected(p, "a value (object, array, string, integer, true, false or null)");
}

/* The elements or members of an array or object (the opening bracket already
 * read), appended to container->first as they are read so that json_free of
 * the container releases them on any error. */
static bool json_container(struct json_parser *p, struct json *container, bool object)
{
    const char close = object ? '}' : ']';
    struct json **tail = &container->first;

    if (++p->depth > JSON_MAX_DEPTH)
        return json_fail(p, container->offset, "nested deeper than %d levels", JSON_MAX_DEPTH);
    p->pos++;
    json_skip_space(p);
    if (json_peek(p) == close) {
        p->pos++;
        p->depth--;
        return true;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_at = 0;
        json_skip_space(p);
        if (object) {
            key_at = p->pos;
            if (json_peek(p) != '"')
                return json_expected(p, "a string key");
            if (!json_string(p, &key))
                return false;
            for (const struct json *member = container->first; member != NULL; member = member->next)
                if (strcmp(member->key, key) == 0)
                    return json_fail(p, key_at, "duplicate key \"%.60s\"", key);
            json_skip_space(p);
            if (json_peek(p) != ':')
                return json_expected(p, "':' after a key");
            p->pos++;
        }
        struct json *item = json_value(p);
        if (item == NULL)
            return false;
        item->key = key;
        item->key_offset = key_at;
        *tail = item;
        tail = &item->next;
        json_skip_space(p);
        if (json_peek(p) == close)
            break;
        if (json_peek(p) != ',')
            return json_expected(p, object ? "',' or '}' in an object" : "',' or ']' in an array");
        p->pos++;
        json_skip_space(p);
        if (json_peek(p) == close)
            return json_fail(p, p->pos, "trailing comma before '%c'", close);
    }
    p->pos++;
    p->depth--;
    return true;
}

static struct json *json_value(struct json_parser *p)
{
    json_skip_space(p);
    struct json *value = calloc(1, sizeof *value);
    if (value == NULL) {
        json_fail(p, p->pos, "out of memory");
        return NULL;
    }
    value->offset = p->pos;
    bool ok;
    int c = json_peek(p);
    if (c == '{' || c == '[') {
        value->type = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        ok = json_container(p, value, c == '{');
    } else if (c == '"') {
        value->type = JSON_STRING;
        ok = json_string(p, &value->string);
    } else if (c == '-' || json_is_digit(c)) {
        ok = json_integer(p, value);
    } else {
        ok = json_literal(p, value);
    }
    if (!ok) {
        json_free(value);
        return NULL;
    }
    return value;
}

/* The whole text must be one value, with only white space around it. */
static struct json *json_parse(struct json_parser *p)
{
    struct json *root = json_value(p);
    if (root == NULL)
        return NULL;
    json_skip_space(p);
    if (p->pos != p->length) {
        json_fail(p, p->pos, "unexpected content after the top-level value");
        json_free(root);
        return NULL;
    }
    return root;
}

/* ------------------------------------------------------------------------ */
/* The layout: JSON to the device tables, every mistake reported on one      */
/* stderr line that names the file, the key path, the byte and the problem.  */
/* ------------------------------------------------------------------------ */

#define WHERE_SIZE 96

struct layout_reader {
    const char *file;
};

/* A key path for messages ("gpus[1].mig_devices[0].uuid"); cut short when
 * longer than WHERE_SIZE, which only shortens a message. */
__attribute__((format(printf, 2, 3))) static void make_path(char path[WHERE_SIZE], const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(path, WHERE_SIZE, fmt, args);
    va_end(args);
}

/* where.key, or key at the top level */
static void member_path(char path[WHERE_SIZE], const char *where, const char *key)
{
    make_path(path, "%s%s%s", where, where[0] != '\0' ? "." : "", key);
}

static void layout_vfail(const struct layout_reader *r, const char *where, size_t offset, const char *fmt,
                         va_list args)
{
    char message[256];
    vsnprintf(message, sizeof message, fmt, args);
    fprintf(stderr, "fake-nvml: %s: %s (byte %zu): %s\n", r->file, where[0] != '\0' ? where : "top level", offset,
            message);
}

/* Reports a mistake in the value `at` (always returns false). */
__attribute__((format(printf, 4, 5))) static bool layout_fail(const struct layout_reader *r, const char *where,
                                                              const struct json *at, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    layout_vfail(r, where, at->offset, fmt, args);
    va_end(args);
    return false;
}

/* Reports a mistake in the name of the member `at`. */
__attribute__((format(printf, 4, 5))) static bool layout_fail_key(const struct layout_reader *r, const char *where,
                                                                  const struct json *at, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    layout_vfail(r, where, at->key_offset, fmt, args);
    va_end(args);
    return false;
}

static const struct json *json_member(const struct json *object, const char *key)
{
    for (const struct json *member = object->first; member != NULL; member = member->next)
        if (strcmp(member->key, key) == 0)
            return member;
    return NULL;
}

/* Unknown keys are refused: a misspelt optional key ("mig_mdoe") would
 * otherwise be ignored silently and the test would run on other GPUs. */
static bool check_keys(const struct layout_reader *r, const struct json *object, const char *where,
                       const char *const *allowed)
{
    for (const struct json *member = object->first; member != NULL; member = member->next) {
        bool known = false;
        for (const char *const *key = allowed; *key != NULL && !known; key++)
            known = strcmp(*key, member->key) == 0;
        if (!known)
            return layout_fail_key(r, where, member, "unknown key \"%.60s\"", member->key);
    }
    return true;
}

/* object[key] of the given type; *value is NULL when an optional key is absent. */
static bool field(const struct layout_reader *r, const struct json *object, const char *where, const char *key,
                  enum json_type type, bool required, const struct json **value)
{
    *value = json_member(object, key);
    if (*value == NULL)
        return required ? layout_fail(r, where, object, "missing key \"%s\"", key) : true;
    if ((*value)->type != type) {
        char path[WHERE_SIZE];
        member_path(path, where, key);
        return layout_fail(r, path, *value, "expected %s, got %s", json_type_name(type),
                           json_type_name((*value)->type));
    }
    return true;
}

static bool read_string(const struct layout_reader *r, const struct json *object, const char *where, const char *key,
                        bool required, char *out, size_t size)
{
    const struct json *value;
    if (!field(r, object, where, key, JSON_STRING, required, &value))
        return false;
    if (value == NULL)
        return true;
    char path[WHERE_SIZE];
    member_path(path, where, key);
    if (value->string[0] == '\0')
        return layout_fail(r, path, value, "must not be empty");
    if (strlen(value->string) >= size)
        return layout_fail(r, path, value, "longer than %zu bytes", size - 1);
    memcpy(out, value->string, strlen(value->string) + 1);
    return true;
}

static bool read_integer(const struct layout_reader *r, const struct json *object, const char *where, const char *key,
                         bool required, long long min, long long max, long long *out)
{
    const struct json *value;
    if (!field(r, object, where, key, JSON_INT, required, &value))
        return false;
    if (value == NULL)
        return true;
    if (value->integer < min || value->integer > max) {
        char path[WHERE_SIZE];
        member_path(path, where, key);
        return layout_fail(r, path, value, "%lld is out of range [%lld, %lld]", value->integer, min, max);
    }
    *out = value->integer;
    return true;
}

static bool read_bus_id(const struct layout_reader *r, const struct json *object, const char *where, const char *key,
                        struct pci_address *address)
{
    char text[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    if (!read_string(r, object, where, key, true, text, sizeof text))
        return false;
    if (!parse_bus_id(text, true, address)) {
        char path[WHERE_SIZE];
        make_path(path, "%s.%s", where, key);
        return layout_fail(r, path, json_member(object, key), "\"%s\" is not a PCI bus id like \"00000000:07:00.0\"",
                           text);
    }
    return true;
}

static bool read_uuid(const struct layout_reader *r, const struct json *object, const char *where, const char *prefix,
                      char *out)
{
    if (!read_string(r, object, where, "uuid", true, out, NVML_DEVICE_UUID_V2_BUFFER_SIZE))
        return false;
    if (!valid_uuid(out, prefix)) {
        char path[WHERE_SIZE];
        make_path(path, "%s.uuid", where);
        return layout_fail(r, path, json_member(object, "uuid"),
                           "\"%.60s\" is not \"%s\" followed by a lower-case 8-4-4-4-12 hex UUID", out, prefix);
    }
    return true;
}

static bool read_mig_device(const struct layout_reader *r, const struct json *object, const char *where,
                            struct nvmlDevice_st *gpu, struct nvmlDevice_st *mig)
{
    static const char *const keys[] = {"uuid", "name", "gpu_instance_id", "compute_instance_id", "memory_total", NULL};
    long long gpu_instance_id, compute_instance_id, memory_total;
    if (object->type != JSON_OBJECT)
        return layout_fail(r, where, object, "expected an object, got %s", json_type_name(object->type));
    if (!check_keys(r, object, where, keys) || !read_uuid(r, object, where, "MIG-", mig->uuid) ||
        !read_string(r, object, where, "name", true, mig->name, sizeof mig->name) ||
        !read_integer(r, object, where, "gpu_instance_id", true, 0, UINT_MAX, &gpu_instance_id) ||
        !read_integer(r, object, where, "compute_instance_id", true, 0, UINT_MAX, &compute_instance_id) ||
        !read_integer(r, object, where, "memory_total", true, 1, LLONG_MAX, &memory_total))
        return false;
    mig->is_mig = true;
    mig->parent = gpu;
    mig->gpu_instance_id = (unsigned int)gpu_instance_id;
    mig->compute_instance_id = (unsigned int)compute_instance_id;
    mig->memory_total = (unsigned long long)memory_total;
    return true;
}

static bool read_nvlink(const struct layout_reader *r, const struct json *object, const char *where,
                        struct nvmlDevice_st *gpu)
{
    static const char *const keys[] = {"link", "remote_pci_bus_id", NULL};
    long long link;
    struct pci_address remote;
    if (object->type != JSON_OBJECT)
        return layout_fail(r, where, object, "expected an object, got %s", json_type_name(object->type));
    if (!check_keys(r, object, where, keys) ||
        !read_integer(r, object, where, "link", true, 0, NVML_NVLINK_MAX_LINKS - 1, &link) ||
        !read_bus_id(r, object, where, "remote_pci_bus_id", &remote))
        return false;
    if (gpu->links[link].active)
        return layout_fail(r, where, json_member(object, "link"), "link %lld is listed twice", link);
    gpu->links[link].active = true;
    gpu->links[link].remote = remote;
    gpu->has_nvlink = true;
    return true;
}

static bool read_gpu(const struct layout_reader *r, const struct json *object, const char *where,
                     struct nvmlDevice_st *gpu)
{
    static const char *const keys[] = {"uuid",     "name",        "pci_bus_id", "memory_total", "numa_node",
                                       "pcie_switch", "mig_mode", "mig_devices", "nvlinks",     NULL};
    long long memory_total, numa_node, mig_mode = 0;
    const struct json *mig_devices, *nvlinks;
    if (object->type != JSON_OBJECT)
        return layout_fail(r, where, object, "expected an object, got %s", json_type_name(object->type));
    if (!check_keys(r, object, where, keys) || !read_uuid(r, object, where, "GPU-", gpu->uuid) ||
        !read_string(r, object, where, "name", true, gpu->name, sizeof gpu->name) ||
        !read_bus_id(r, object, where, "pci_bus_id", &gpu->pci) ||
        !read_integer(r, object, where, "memory_total", true, 1, LLONG_MAX, &memory_total) ||
        !read_integer(r, object, where, "numa_node", true, 0, 1023, &numa_node) ||
        !read_string(r, object, where, "pcie_switch", false, gpu->pcie_switch, sizeof gpu->pcie_switch) ||
        !read_integer(r, object, where, "mig_mode", false, 0, 1, &mig_mode) ||
        !field(r, object, where, "mig_devices", JSON_ARRAY, false, &mig_devices) ||
        !field(r, object, where, "nvlinks", JSON_ARRAY, false, &nvlinks))
        return false;
    gpu->memory_total = (unsigned long long)memory_total;
    gpu->numa_node = (int)numa_node;
    gpu->mig_mode = (unsigned int)mig_mode;
    for (size_t i = 0; i < sizeof known_boards / sizeof known_boards[0]; i++) {
        if (strcmp(known_boards[i].name, gpu->name) == 0) {
            gpu->pci_device_id = known_boards[i].device_id;
            gpu->pci_subsystem_id = known_boards[i].subsystem_id;
        }
    }
    /* The MIG-capable boards of the layouts; add names here for others. */
    gpu->mig_capable = strstr(gpu->name, "A100") != NULL || strstr(gpu->name, "H100") != NULL;

    char path[WHERE_SIZE];
    if (mig_mode == NVML_DEVICE_MIG_ENABLE && !gpu->mig_capable) {
        make_path(path, "%s.mig_mode", where);
        return layout_fail(r, path, json_member(object, "mig_mode"),
                           "MIG needs a MIG-capable GPU (a name with A100 or H100), not \"%s\"", gpu->name);
    }
    if (mig_devices != NULL) {
        unsigned long long memory_used = 0;
        if (mig_mode != NVML_DEVICE_MIG_ENABLE && mig_devices->first != NULL) {
            make_path(path, "%s.mig_devices", where);
            return layout_fail(r, path, mig_devices, "MIG devices need \"mig_mode\": 1");
        }
        for (const struct json *item = mig_devices->first; item != NULL; item = item->next) {
            make_path(path, "%s.mig_devices[%u]", where, gpu->mig_count);
            if (gpu->mig_count == MIG_SLOTS)
                return layout_fail(r, path, item, "more than %d MIG devices", MIG_SLOTS);
            struct nvmlDevice_st *mig = &migs[gpu->index][gpu->mig_count];
            if (!read_mig_device(r, item, path, gpu, mig))
                return false;
            for (unsigned int j = 0; j < gpu->mig_count; j++) {
                const struct nvmlDevice_st *other = &migs[gpu->index][j];
                if (other->gpu_instance_id == mig->gpu_instance_id &&
                    other->compute_instance_id == mig->compute_instance_id)
                    return layout_fail(r, path, item, "same instance ids as mig_devices[%u]", j);
            }
            memory_used += mig->memory_total;
            if (memory_used > gpu->memory_total)
                return layout_fail(r, path, item, "MIG devices use more memory than the GPU has");
            gpu->mig_count++;
        }
    }
    if (nvlinks != NULL) {
        unsigned int i = 0;
        for (const struct json *item = nvlinks->first; item != NULL; item = item->next, i++) {
            make_path(path, "%s.nvlinks[%u]", where, i);
            if (!read_nvlink(r, item, path, gpu))
                return false;
        }
    }
    return true;
}

/* UUIDs and bus ids name one device each: a copy-pasted layout must fail. */
static bool check_unique(const struct layout_reader *r, const struct json *gpu_items)
{
    const struct json *item = gpu_items;
    for (unsigned int i = 0; i < gpu_count; i++, item = item->next) {
        char where[WHERE_SIZE];
        make_path(where, "gpus[%u]", i);
        for (unsigned int j = 0; j < i; j++) {
            if (same_address(&gpus[i].pci, &gpus[j].pci))
                return layout_fail(r, where, item, "same pci_bus_id as gpus[%u]", j);
            if (strcmp(gpus[i].uuid, gpus[j].uuid) == 0)
                return layout_fail(r, where, item, "same uuid as gpus[%u]", j);
            for (unsigned int m = 0; m < gpus[j].mig_count; m++)
                for (unsigned int n = 0; n < gpus[i].mig_count; n++)
                    if (strcmp(migs[i][n].uuid, migs[j][m].uuid) == 0)
                        return layout_fail(r, where, item, "mig_devices[%u] has the uuid of gpus[%u].mig_devices[%u]",
                                           n, j, m);
        }
        for (unsigned int n = 0; n < gpus[i].mig_count; n++)
            for (unsigned int m = 0; m < n; m++)
                if (strcmp(migs[i][n].uuid, migs[i][m].uuid) == 0)
                    return layout_fail(r, where, item, "mig_devices[%u] has the uuid of mig_devices[%u]", n, m);
    }
    return true;
}

static bool read_layout(const struct layout_reader *r, const struct json *root)
{
    static const char *const keys[] = {"driver_version", "cuda_driver_version", "gpus", NULL};
    long long cuda_version;
    const struct json *gpu_list;
    if (root->type != JSON_OBJECT)
        return layout_fail(r, "", root, "expected an object, got %s", json_type_name(root->type));
    if (!check_keys(r, root, "", keys) ||
        !read_string(r, root, "", "driver_version", true, driver_version, sizeof driver_version) ||
        !read_integer(r, root, "", "cuda_driver_version", true, 1000, INT_MAX, &cuda_version) ||
        !field(r, root, "", "gpus", JSON_ARRAY, true, &gpu_list))
        return false;
    cuda_driver_version = (int)cuda_version;
    for (const struct json *item = gpu_list->first; item != NULL; item = item->next) {
        char where[WHERE_SIZE];
        if (gpu_count == MAX_GPUS)
            return layout_fail(r, "gpus", item, "more than %d GPUs", MAX_GPUS);
        make_path(where, "gpus[%u]", gpu_count);
        gpus[gpu_count].index = gpu_count;
        if (!read_gpu(r, item, where, &gpus[gpu_count]))
            return false;
        gpu_count++;
    }
    return check_unique(r, gpu_list->first);
}

static void clear_tables(void)
{
    memset(gpus, 0, sizeof gpus);
    memset(migs, 0, sizeof migs);
    memset(driver_version, 0, sizeof driver_version);
    gpu_count = 0;
    cuda_driver_version = 0;
}

/* The whole file in a NUL-terminated buffer, or NULL after a message. */
static char *read_file(const char *path, size_t *length, nvmlReturn_t *ret)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        /* No layout is a machine without the driver; anything else is a broken set-up. */
        int error = errno;
        *ret = error == ENOENT ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_ERROR_UNKNOWN;
        fprintf(stderr, "fake-nvml: %s: cannot open the layout (FAKE_NVML_LAYOUT): %s\n", path, strerror(error));
        return NULL;
    }
    *ret = NVML_ERROR_UNKNOWN;
    /* One byte more than allowed tells a file that is too large. No fstat:
     * it would need glibc 2.33, newer than some images this is mounted in. */
    char *text = malloc(MAX_LAYOUT_BYTES + 2);
    if (text == NULL) {
        fprintf(stderr, "fake-nvml: %s: out of memory reading the layout\n", path);
        fclose(file);
        return NULL;
    }
    *length = fread(text, 1, MAX_LAYOUT_BYTES + 1, file);
    int error = ferror(file) ? errno : 0;
    fclose(file);
    if (error != 0 || *length > MAX_LAYOUT_BYTES) {
        if (error != 0)
            fprintf(stderr, "fake-nvml: %s: cannot read the layout: %s\n", path, strerror(error));
        else
            fprintf(stderr, "fake-nvml: %s: the layout is larger than %d bytes\n", path, MAX_LAYOUT_BYTES);
        free(text);
        return NULL;
    }
    /* Cut to size: the parser reading past the text would then be caught
     * by AddressSanitizer in the tests, not hidden in a 1 MiB buffer. */
    char *exact = realloc(text, *length + 1);
    if (exact != NULL)
        text = exact;
    text[*length] = '\0';
    *ret = NVML_SUCCESS;
    return text;
}

/* Fills the tables from FAKE_NVML_LAYOUT; the caller holds init_lock. */
static nvmlReturn_t load_layout(void)
{
    const char *path = getenv("FAKE_NVML_LAYOUT");
    if (path == NULL || path[0] == '\0')
        return NVML_ERROR_DRIVER_NOT_LOADED; /* silently, as on a machine without a GPU */

    nvmlReturn_t ret;
    size_t length = 0;
    char *text = read_file(path, &length, &ret);
    if (text == NULL)
        return ret;

    struct json_parser parser = {.text = text, .length = length};
    struct json *root = json_parse(&parser);
    clear_tables();
    if (root == NULL) {
        fprintf(stderr, "fake-nvml: %s: byte %zu: %s\n", path, parser.error_at, parser.error);
        ret = NVML_ERROR_UNKNOWN;
    } else {
        struct layout_reader reader = {.file = path};
        ret = read_layout(&reader, root) ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
    }
    if (ret != NVML_SUCCESS)
        clear_tables();
    json_free(root);
    free(text);
    return ret;
}

/* ------------------------------------------------------------------------ */
/* The NVML API.                                                             */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t init(void)
{
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t ret = atomic_load(&init_count) == 0 ? load_layout() : NVML_SUCCESS;
    if (ret == NVML_SUCCESS)
        atomic_fetch_add(&init_count, 1);
    pthread_mutex_unlock(&init_lock);
    return ret;
}

/* The flags (NO_GPUS, NO_ATTACH) change nothing for made-up GPUs. */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    log_call(__func__);
    return init();
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    log_call(__func__);
    return init();
}

/* The pre-_v2 name, still exported by the real library for old binaries. */
EXPORT nvmlReturn_t nvmlInit(void)
{
    log_call(__func__);
    return init();
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    log_call(__func__);
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t ret = NVML_ERROR_UNINITIALIZED;
    if (atomic_load(&init_count) > 0) {
        if (atomic_fetch_sub(&init_count, 1) == 1)
            clear_tables();
        ret = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&init_lock);
    return ret;
}

/* Texts as the real library returns them (pynvml keeps the same table). */
EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    log_call(__func__);
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t ret = enter(__func__);
    return ret != NVML_SUCCESS ? ret : copy_out(version, length, driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    nvmlReturn_t ret = enter(__func__);
    if (ret != NVML_SUCCESS)
        return ret;
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    nvmlReturn_t ret = enter(__func__);
    if (ret != NVML_SUCCESS)
        return ret;
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    nvmlReturn_t ret = enter(__func__);
    if (ret != NVML_SUCCESS)
        return ret;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t ret = enter(__func__);
    if (ret != NVML_SUCCESS)
        return ret;
    if (device == NULL || index >= gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

/* GPU and MIG UUIDs both resolve, as with NVML since MIG exists. */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t ret = enter(__func__);
    if (ret != NVML_SUCCESS)
        return ret;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (strcmp(gpus[i].uuid, uuid) == 0) {
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
        for (unsigned int j = 0; j < gpus[i].mig_count; j++) {
            if (strcmp(migs[i][j].uuid, uuid) == 0) {
                *device = &migs[i][j];
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    nvmlReturn_t ret = enter(__func__);
    struct pci_address address;
    if (ret != NVML_SUCCESS)
        return ret;
    if (pciBusId == NULL || device == NULL || !parse_bus_id(pciBusId, false, &address))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (same_address(&gpus[i].pci, &address)) {
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_gpu(__func__, device, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = gpu->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t ret = enter_device(__func__, device, &d);
    return ret != NVML_SUCCESS ? ret : copy_out(uuid, length, d->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t ret = enter_device(__func__, device, &d);
    return ret != NVML_SUCCESS ? ret : copy_out(name, length, d->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_gpu(__func__, device, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci_info(pci, &gpu->pci, gpu->pci_device_id, gpu->pci_subsystem_id);
    return NVML_SUCCESS;
}

/* An idle device: all of its memory free. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t ret = enter_device(__func__, device, &d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = d->memory_total;
    memory->free = d->memory_total;
    memory->used = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t ret = enter_device(__func__, device, &d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* The caller says which struct it passed; another size must not be written. */
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = d->memory_total;
    memory->reserved = 0;
    memory->free = d->memory_total;
    memory->used = 0;
    return NVML_SUCCESS;
}

/* The N of /dev/nvidiaN: the index, as on a machine whose GPUs enumerate in order. */
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_gpu(__func__, device, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (minorNumber == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = gpu->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_gpu(__func__, device, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (node == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *node = (unsigned int)gpu->numa_node;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_gpu(__func__, device, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (currentMode == NULL || pendingMode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = gpu->mig_mode;
    *pendingMode = gpu->mig_mode;
    return NVML_SUCCESS;
}

/* NVML documents 0 when MIG is unsupported or disabled. */
static unsigned int max_mig_devices(const struct nvmlDevice_st *gpu)
{
    return gpu->mig_mode == NVML_DEVICE_MIG_ENABLE ? MIG_SLOTS : 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_gpu(__func__, device, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = max_mig_devices(gpu);
    return NVML_SUCCESS;
}

/* Slots past the layout's MIG devices are empty (NOT_FOUND); indexes past
 * the maximum are invalid. */
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_gpu(__func__, device, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!gpu->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    if (migDevice == NULL || index >= max_mig_devices(gpu))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= gpu->mig_count)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &migs[gpu->index][index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t ret = enter_device(__func__, device, &d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (isMigDevice == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = d->is_mig;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    struct nvmlDevice_st *mig;
    nvmlReturn_t ret = enter_device(__func__, migDevice, &mig);
    if (ret != NVML_SUCCESS)
        return ret;
    if (device == NULL || !mig->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = mig->parent;
    return NVML_SUCCESS;
}

/* Instance ids exist on MIG devices only. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t ret = enter_device(__func__, device, &d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = d->gpu_instance_id;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t ret = enter_device(__func__, device, &d);
    if (ret != NVML_SUCCESS)
        return ret;
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = d->compute_instance_id;
    return NVML_SUCCESS;
}

/*
 * The NVLink calls: a GPU with no links in the layout has no NVLink at all
 * (NOT_SUPPORTED, like a PCIe board); on one that has some, unlisted links
 * are inactive, and have no remote end to report.
 */
static nvmlReturn_t enter_nvlink(const char *function, nvmlDevice_t device, unsigned int link,
                                 struct nvmlDevice_st **gpu)
{
    nvmlReturn_t ret = enter_gpu(function, device, gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    return (*gpu)->has_nvlink ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_nvlink(__func__, device, link, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (isActive == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = gpu->links[link].active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    struct nvmlDevice_st *gpu;
    nvmlReturn_t ret = enter_nvlink(__func__, device, link, &gpu);
    if (ret != NVML_SUCCESS)
        return ret;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->links[link].active)
        return NVML_ERROR_NOT_SUPPORTED;
    /* The remote end's ids when it is one of our GPUs (an NVSwitch gets 0s). */
    unsigned int device_id = 0, subsystem_id = 0;
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (same_address(&gpus[i].pci, &gpu->links[link].remote)) {
            device_id = gpus[i].pci_device_id;
            subsystem_id = gpus[i].pci_subsystem_id;
        }
    }
    fill_pci_info(pci, &gpu->links[link].remote, device_id, subsystem_id);
    return NVML_SUCCESS;
}

/* The closest common ancestor from the layout's PCIe switches and NUMA nodes. */
EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t *pathInfo)
{
    struct nvmlDevice_st *a, *b;
    nvmlReturn_t ret = enter_gpu(__func__, device1, &a);
    if (ret != NVML_SUCCESS)
        return ret;
    b = lookup(device2);
    if (b == NULL || pathInfo == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (b->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (a == b)
        *pathInfo = NVML_TOPOLOGY_INTERNAL;
    else if (a->pcie_switch[0] != '\0' && strcmp(a->pcie_switch, b->pcie_switch) == 0)
        *pathInfo = NVML_TOPOLOGY_SINGLE;
    else if (a->numa_node == b->numa_node)
        *pathInfo = NVML_TOPOLOGY_NODE;
    else
        *pathInfo = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}
