"""placeholder replaced by the keras format module"""
