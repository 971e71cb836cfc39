// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-user quota: the bytes of all regions a uid owns, persistent or not,
 * destroyed but still mapped, or held back because a chunk was still
 * pinned when the region died (region.c), counted from CREATE until the
 * memory returns to the pool. A caller without CAP_SYS_ADMIN cannot go
 * above user_max_bytes (-EDQUOT); administrators are counted too but not
 * limited. The table maps a uid in the initial namespace to its bytes (an
 * xarray value entry), under moem_lock.
 */
#include <linux/capability.h>
#include <linux/uidgid.h>
#include <linux/xarray.h>

#include "internal.h"

static DEFINE_XARRAY(moem_users);
static u64 moem_user_max; /* bytes; guarded by moem_lock */

void moem_user_set_max(u64 bytes)
{
	mutex_lock(&moem_lock);
	moem_user_max = bytes;
	mutex_unlock(&moem_lock);
}

u64 moem_user_get_max(void)
{
	u64 v;

	mutex_lock(&moem_lock);
	v = moem_user_max;
	mutex_unlock(&moem_lock);
	return v;
}

static u64 moem_user_bytes_locked(kuid_t uid)
{
	void *e = xa_load(&moem_users, from_kuid(&init_user_ns, uid));

	return e ? xa_to_value(e) : 0;
}

u64 moem_user_bytes(kuid_t uid)
{
	u64 v;

	mutex_lock(&moem_lock);
	v = moem_user_bytes_locked(uid);
	mutex_unlock(&moem_lock);
	return v;
}

int moem_user_charge(kuid_t uid, u64 bytes)
{
	u64 cur, want;
	int ret = 0;

	mutex_lock(&moem_lock);
	cur = moem_user_bytes_locked(uid);
	/* Sizes are checked against the pool ceiling: no overflow here. */
	want = cur + bytes;
	if (want > moem_user_max && !capable(CAP_SYS_ADMIN)) {
		ret = -EDQUOT;
		goto out_unlock;
	}
	ret = xa_err(xa_store(&moem_users, from_kuid(&init_user_ns, uid), xa_mk_value(want),
			      GFP_KERNEL));
out_unlock:
	mutex_unlock(&moem_lock);
	return ret;
}

void moem_user_uncharge_locked(kuid_t uid, u64 bytes)
{
	unsigned long idx = from_kuid(&init_user_ns, uid);
	u64 cur;

	lockdep_assert_held(&moem_lock);
	cur = moem_user_bytes_locked(uid);
	if (WARN_ON(cur < bytes))
		bytes = cur;
	if (cur == bytes)
		xa_erase(&moem_users, idx);
	else
		/* Replacing a present value entry allocates nothing: cannot fail. */
		xa_store(&moem_users, idx, xa_mk_value(cur - bytes), GFP_NOWAIT);
}

void moem_users_exit(void)
{
	WARN_ON(!xa_empty(&moem_users));
	xa_destroy(&moem_users);
}
